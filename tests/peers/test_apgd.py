"""APGD against the peers at equal steps: ART's AutoProjectedGradientDescent on TensorFlow and
torchattacks' APGD on PyTorch on a trained digits CNN (eps 0.1), and adv-lib 0.2.8's L1 APGD on PyTorch."""

import numpy as np
import pytest

import gradkit
from helpers import models
from helpers.models import LOGITS_CE, accuracy

from conftest import BACKEND

if BACKEND not in ("tensorflow", "torch"):
    pytest.skip("ART runs on TensorFlow, torchattacks on PyTorch", allow_module_level=True)


STEPS, EPS, N = 20, 0.1, 300


@pytest.fixture(scope="module")
def cnn():
    return models.digits_cnn(n_test=N)


def peer_apgd(model, x, y, loss):
    if BACKEND == "tensorflow":
        from art.attacks.evasion import AutoProjectedGradientDescent
        from art.estimators.classification import TensorFlowV2Classifier

        clf = TensorFlowV2Classifier(model, nb_classes=10, input_shape=(8, 8, 1), loss_object=LOGITS_CE,
                                     clip_values=(0, 1))  # fmt: skip
        art_loss = "cross_entropy" if loss == "ce" else "difference_logits_ratio"
        attack = AutoProjectedGradientDescent(
            clf, eps=EPS, eps_step=2 * EPS, max_iter=STEPS, batch_size=N,
            loss_type=art_loss, nb_random_init=1, verbose=False,
        )  # fmt: skip
        return attack.generate(x, y)
    import torch
    import torchattacks

    attack = torchattacks.APGD(model, norm="Linf", eps=EPS, steps=STEPS, n_restarts=1, loss=loss, seed=0)
    return attack(torch.from_numpy(x), torch.from_numpy(y.astype("int64"))).detach().cpu().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["ce", "dlr"])
def test_apgd_within_one_point_of_the_peer(cnn, loss):
    model, x, y = cnn
    ours = accuracy(
        model, gradkit.apgd(model, x, y, eps=EPS, steps=STEPS, loss=loss, clip_values=(0, 1), seed=0), y
    )
    theirs = accuracy(model, peer_apgd(model, x, y, loss), y)
    assert accuracy(model, x, y) - ours > 0.2  # the attack does something on this model
    print(f"{BACKEND} APGD-{loss}: gradkit {ours:.3f}, peer {theirs:.3f}")
    assert ours <= theirs + 0.01, (ours, theirs)


@pytest.mark.slow
def test_evaluate_is_never_above_the_worst_case_of_the_peers_and_pgd(cnn):
    model, x, y = cnn
    robust = np.ones(len(y), bool)
    pgd10 = gradkit.pgd(model, x, y, eps=EPS, eps_step=0.025, steps=10, clip_values=(0, 1), seed=0)
    for adv in (peer_apgd(model, x, y, "ce"), peer_apgd(model, x, y, "dlr"), pgd10):
        robust &= model.predict(adv, verbose=0).argmax(axis=1) == y
    result = gradkit.evaluate(model, x, y, eps=EPS, clip_values=(0, 1), n_queries=500, verbose=0)
    print(
        f"{BACKEND}: evaluate {result.robust_accuracy:.3f}, worst case of peers + PGD-10 {robust.mean():.3f}"
    )
    assert result.robust_accuracy <= robust.mean()
    assert accuracy(model, result.x_adv, y) == result.robust_accuracy  # its examples show it


@pytest.fixture(scope="module")
def digits_cnn():
    return models.digits_cnn(filters=8, n_train=1200, epochs=5, n_test=100)


SEEDS = (0, 1)  # adv-lib's L1 APGD: one seed moves a figure by about a point, two are averaged


@pytest.mark.skipif(BACKEND != "torch", reason="adv-lib runs on PyTorch")
@pytest.mark.parametrize("eps", [2.0, 4.0])
@pytest.mark.parametrize("largereps", [False, True])
def test_apgd_l1_within_one_point_of_adv_lib(digits_cnn, eps, largereps):
    import torch

    from conftest import import_adv_lib

    attacks = import_adv_lib()  # a pinned test dependency: its absence is a failure, not a skip
    model, x, y = digits_cnn
    ours, theirs = [], []
    for seed in SEEDS:  # one seed moves either figure by about a point on 300 points: two are averaged
        adv = gradkit.apgd(model, x, y, eps=eps, norm=1, steps=STEPS, clip_values=(0, 1), seed=seed,
                           use_largereps=largereps)  # fmt: skip
        ours.append(accuracy(model, adv, y))
        torch.manual_seed(seed)
        adv = attacks.apgd(model, torch.from_numpy(x), torch.from_numpy(y.astype("int64")), eps=eps, norm=1,
                           n_iter=STEPS, loss_function="ce", use_large_reps=largereps)  # fmt: skip
        theirs.append(accuracy(model, adv.detach().numpy(), y))
    ours, theirs = float(np.mean(ours)), float(np.mean(theirs))
    print(f"APGD-L1 eps {eps} largereps {largereps}: gradkit {ours:.3f}, adv-lib {theirs:.3f}")
    assert accuracy(model, x, y) - ours > 0.3  # the attack does something on this model
    assert ours <= theirs + 0.01, (ours, theirs)
