"""FAB (Croce & Hein 2020): hand-computed steps on linear models, the minimum-norm and eps contracts,
ensembles judged by their vote, FAB-T in `evaluate`, bad input, and parity with adv-lib 0.2.8 and
torchattacks on a digits CNN (PyTorch backend)."""

import sys

import keras
import numpy as np
import pytest

import gradkit
from gradkit.attacks import decide, recording

from conftest import BACKEND, set_weights_from

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
NORMS = [np.inf, 2, 1]


def fab_run(model, x, y, **kwargs):
    """`gradkit.fab` and what its record says: `(x_adv, norms, success, record)`."""
    with recording() as record:
        x_adv = gradkit.fab(model, x, y, **kwargs)
    return x_adv, record.norms, record.success, record


def lp(a, norm):
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    return np.linalg.norm(a, ord=norm, axis=1)


@pytest.fixture(scope="module")
def linear():
    """z_1 - z_0 = 2 x_0 - x_1 + 0.7: at (0.3, 1.0) and at (0.05, 0.5) it is 0.3 (class 1), and FAB's
    hyperplane for class 0 has normal w = (-2, 1) and offset f = z_0 - z_1 = -0.3."""
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.array([[0.0, 2.0], [0.0, -1.0]], "float32"), np.array([0.0, 0.7], "float32")])
    return model


# The smallest d with 2 d_0 - d_1 = -0.3 (worked by hand): Linf spreads it equally over the two
# coordinates (|d_i| = 0.3 / ||w||_1 = 0.1), L2 goes along w (0.3 w / ||w||^2), L1 uses only the
# coordinate of largest |w_i| (0.3 / 2).
UNBOXED = {np.inf: [-0.1, 0.1], 2: [-0.12, 0.06], 1: [-0.15, 0.0]}


@pytest.mark.parametrize("norm", NORMS)
def test_one_step_lands_on_the_hand_computed_minimal_perturbation(linear, norm):
    x = np.array([[0.3, 1.0]], "float32")
    x_adv, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=1)
    # at the first step the iterate is x0, both projections coincide, and the step is eta * d (eta 1.05)
    expected = x + 1.05 * np.array([UNBOXED[norm]], "float32")
    np.testing.assert_allclose(x_adv, expected, atol=1e-6)
    np.testing.assert_allclose(norms, 1.05 * lp([UNBOXED[norm]], norm), rtol=1e-5)
    assert success.all() and decide(linear, x_adv)[0] == 0
    # more steps: FAB's backward steps bring it to the boundary, from the adversarial side
    _, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=30)
    exact = lp([UNBOXED[norm]], norm)
    assert success.all() and exact[0] <= norms[0] <= 1.01 * exact[0]


@pytest.mark.parametrize("norm", NORMS)
def test_the_box_bounds_the_step_as_computed_by_hand(linear, norm):
    """At x0 = (0.05, 0.5) in [0, 1], coordinate 0 can only drop 0.05 (a decrease of 2 * 0.05 = 0.1 of
    w . x); the other 0.2 must come from coordinate 1: d = (-0.05, 0.2) in all three norms (Linf:
    lambda = 0.2; L2: e_0 = min(2 lambda, 0.05), e_1 = lambda = 0.2; L1: coordinate 0 first, full)."""
    x = np.array([[0.05, 0.5]], "float32")
    x_adv, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=1, clip_values=(0, 1))
    np.testing.assert_allclose(x_adv, [[0.0, 0.5 + 1.05 * 0.2]], atol=1e-6)  # x0 + 1.05 d, clipped
    assert success.all() and decide(linear, x_adv)[0] == 0


@pytest.fixture(scope="module")
def mlp():
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(16, activation="relu")(inp)
    return set_weights_from(keras.Model(inp, keras.layers.Dense(4)(hidden)), seed=0, scale=0.8)


@pytest.fixture(scope="module")
def points():
    return np.random.RandomState(1).uniform(0.2, 0.8, size=(24, 6)).astype("float32")


# per-sample norms of the first 6 points (10 steps, box [0, 1]), recorded on JAX; every backend must agree
GOLDEN = {
    np.inf: [0.147593, 0.063136, 0.245214, 0.007205, 0.135503, 0.095831],
    2: [0.239574, 0.095247, 0.36877, 0.010889, 0.219417, 0.144826],
    1: [0.261764, 0.103495, 0.400307, 0.012203, 0.2482, 0.162302],
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("targeted", [False, True])
def test_examples_are_adversarial_in_the_box_and_their_norms_are_returned(mlp, points, norm, targeted):
    model = mlp
    labels = decide(model, points)
    x_adv, norms, success, _ = fab_run(model, points, labels, norm=norm, steps=10, targeted=targeted,
                                       n_target_classes=3, clip_values=(0, 1))  # fmt: skip
    assert x_adv.dtype == np.float32 and x_adv.shape == points.shape
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert success.mean() > 0.8
    np.testing.assert_array_equal(decide(model, x_adv)[success] != labels[success], True)
    np.testing.assert_allclose(norms[success], lp(x_adv - points, norm)[success], rtol=1e-6)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    assert np.isinf(norms[~success]).all()


@pytest.mark.parametrize("norm", NORMS)
def test_eps_mode_keeps_the_examples_inside_the_ball(mlp, points, norm):
    model = mlp
    labels = decide(model, points)
    _, norms, _, _ = fab_run(model, points, labels, norm=norm, steps=10, clip_values=(0, 1))
    eps = float(np.median(norms))
    x_adv, _, success, _ = fab_run(model, points, labels, norm=norm, eps=eps, steps=10, clip_values=(0, 1))
    np.testing.assert_array_equal(success, norms <= eps)  # one run: the same iterates, judged at eps
    assert (lp(x_adv - points, norm) <= eps).all()
    np.testing.assert_array_equal(decide(model, x_adv)[success] != labels[success], True)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    np.testing.assert_array_equal(gradkit.fab(model, points, labels, norm=norm, eps=eps, steps=10,
                                              clip_values=(0, 1)), x_adv)  # fmt: skip


def test_misclassified_points_are_returned_clean_with_norm_zero(mlp, points):
    model = mlp
    labels = (decide(model, points) + 1) % 4
    x_adv, norms, success, _ = fab_run(model, points, labels, steps=10, clip_values=(0, 1))
    np.testing.assert_array_equal(x_adv, points)
    assert success.all() and (norms == 0).all()


def test_backends_agree_on_the_norms(mlp, points):
    model = mlp
    labels = decide(model, points)
    found = {}
    for norm in NORMS:
        found[norm] = fab_run(model, points, labels, norm=norm, steps=10, clip_values=(0, 1))[1][:6]
        print(BACKEND, norm, np.round(found[norm], 6).tolist())
        if GOLDEN[norm]:
            np.testing.assert_allclose(found[norm], GOLDEN[norm], rtol=2e-4)


@pytest.mark.parametrize("objective", ["loss_sum", "vote_margin"])
def test_an_ensemble_is_judged_by_its_weighted_vote(mlp, points, objective):
    other = set_weights_from(keras.models.clone_model(mlp), seed=1, scale=0.8)
    ensemble = gradkit.WeightedEnsemble([mlp, other], [0.3, 0.7])
    labels = decide(ensemble, points)
    x_adv, norms, success, _ = fab_run(ensemble, points, labels, norm=2, steps=10, clip_values=(0, 1),
                                       objective=objective)  # fmt: skip
    print(objective, success.mean())
    assert success.sum() >= 3  # FAB linearizes a smooth surrogate of the vote; success is the vote's
    np.testing.assert_array_equal(decide(ensemble, x_adv)[success] != labels[success], True)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    np.testing.assert_allclose(norms[success], lp(x_adv - points, 2)[success], rtol=1e-6)


def test_fab_t_runs_in_evaluate_on_the_points_still_robust(mlp, points):
    labels = decide(mlp, points)
    eps = 0.03
    first = gradkit.evaluate(mlp, points, labels, eps=eps, attacks=["apgd-ce"], steps=10, clip_values=(0, 1),
                             verbose=0)  # fmt: skip
    both = gradkit.evaluate(mlp, points, labels, eps=eps, attacks=["apgd-ce", "fab-t"], steps=10,
                            clip_values=(0, 1), verbose=0)  # fmt: skip
    record = both.per_attack["fab-t"]
    assert record["n_points"] == round(first.robust_accuracy * len(points))  # only the points left robust
    assert record["n_gradients"] == record["n_points"] * 3 * 10  # 3 targets (C - 1), 10 steps, 1 row each
    assert both.robust_accuracy <= first.robust_accuracy
    alone = gradkit.evaluate(mlp, points, labels, eps=eps, attacks="fab-t", steps=10, clip_values=(0, 1),
                             verbose=0)  # fmt: skip
    broken = np.asarray(alone.broken_by) == "fab-t"
    assert broken.sum() == alone.per_attack["fab-t"]["n_broken"] > 0
    assert (np.abs(alone.x_adv[broken] - points[broken]).max(axis=1) <= eps).all()
    np.testing.assert_array_equal(decide(mlp, alone.x_adv[broken]) != labels[broken], True)


def no_step(*args, **kwargs):
    pytest.fail("an attack step ran")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(norm=3), "`norm` must be np.inf"),
        (dict(norm=0), "`norm` must be np.inf"),
        (dict(eps=-0.1), "`eps` must be"),
        (dict(n_target_classes=0), "`n_target_classes` must be"),
        (dict(steps=0), "`steps` must be"),
        (dict(alpha_max=1.5), "`alpha_max` must be"),
        (dict(eta=0.0), "`eta` must be"),
        (dict(beta=-0.5), "`beta` must be"),
    ],
)
def test_bad_input_is_refused_before_any_step(mlp, points, monkeypatch, kwargs, message):
    monkeypatch.setattr(sys.modules["gradkit.attacks.fab"], "run", no_step)
    with pytest.raises(ValueError, match=message):
        gradkit.fab(mlp, points, **kwargs)


def test_fab_t_needs_three_classes(linear, monkeypatch):
    monkeypatch.setattr(sys.modules["gradkit.attacks.fab"], "run", no_step)
    x = np.array([[0.3, 1.0]], "float32")
    with pytest.raises(ValueError, match="FAB-T.*at least 3 classes"):
        gradkit.fab(linear, x, [1], targeted=True)
    with pytest.raises(ValueError, match="attacks.*fab-t"):
        gradkit.evaluate(linear, x, [1], eps=0.1, attacks=["fab-t"], verbose=0)


@pytest.fixture(scope="module")
def digits_cnn():
    from sklearn.datasets import load_digits

    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.images / 16.0).astype("float32")[..., None], d.target
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10)])  # fmt: skip
    model.compile(keras.optimizers.Adam(0.01), LOGITS_CE)
    model.fit(x[:1200], y[:1200], epochs=5, batch_size=64, verbose=0)
    return model, x[1200:1300], y[1200:1300]


PARITY_EPS = {np.inf: (0.05, 0.1, 0.2), 2: (0.5, 1.0), 1: (2.0, 4.0)}


@pytest.mark.skipif(BACKEND != "torch", reason="adv-lib runs on PyTorch (a Keras model is an nn.Module)")
@pytest.mark.parametrize("norm", NORMS)
def test_parity_with_adv_lib_at_equal_steps(digits_cnn, norm):
    import torch

    from conftest import import_adv_lib

    model, x, y = digits_cnn
    _, ours, _, _ = fab_run(model, x, y, norm=norm, steps=20, clip_values=(0, 1))
    ref = import_adv_lib().fab(model, torch.from_numpy(x), torch.from_numpy(y), norm=float(norm), n_iter=20)
    ref = ref.detach().numpy()
    theirs = np.where(decide(model, ref) != y, lp(ref - x, norm), np.inf)
    correct = decide(model, x) == y
    median, peer = np.median(ours[correct]), np.median(theirs[correct])
    print(f"FAB {norm}: median norm gradkit {median:.5f}, adv-lib {peer:.5f}")
    assert abs(median / peer - 1) <= 0.05
    for eps in PARITY_EPS[norm]:  # the robust accuracy read off the norms
        assert abs(np.mean(ours > eps) - np.mean(theirs > eps)) <= 0.01, eps


@pytest.mark.skipif(BACKEND != "torch", reason="torchattacks runs on PyTorch")
def test_fab_t_robust_accuracy_matches_torchattacks_multi_targeted(digits_cnn):
    import torch
    import torchattacks

    model, x, y = digits_cnn
    x_adv = gradkit.fab(model, x, y, eps=0.1, targeted=True, steps=20, clip_values=(0, 1))
    ours = np.mean(decide(model, x_adv) == y)
    attack = torchattacks.FAB(model, norm="Linf", eps=0.1, steps=20, n_restarts=1, multi_targeted=True,
                              n_classes=10, seed=0)  # fmt: skip
    peer = attack(torch.from_numpy(x), torch.from_numpy(y.astype("int64"))).detach().numpy()
    theirs = np.mean(decide(model, peer) == y)
    print(f"FAB-T eps 0.1: robust accuracy gradkit {ours:.3f}, torchattacks {theirs:.3f}")
    assert np.mean(decide(model, x) == y) - ours > 0.2  # the attack does something on this model
    assert abs(ours - theirs) <= 0.01


def test_a_boosted_model_is_attacked_through_its_ensemble_and_judged_by_its_vote(points):
    def learner():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(3)])  # fmt: skip
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss=LOGITS_CE)
        return model

    labels = (points[:, 0] + points[:, 1] > 1.0).astype(int) + (points[:, 2] > 0.6)
    est = gradkit.SAMME(learner, n_estimators=2, fit_kwargs={"epochs": 20, "verbose": 0}, random_state=0,
                        verbose=0).fit(points, labels)  # fmt: skip
    y = decide(est, points)
    x_adv, norms, success, _ = fab_run(est, points, y, norm=2, steps=10, clip_values=(0, 1))
    assert success.sum() >= 3
    np.testing.assert_array_equal(decide(est, x_adv)[success] != y[success], True)
    np.testing.assert_array_equal(est.predict(x_adv)[success] != y[success], True)
    np.testing.assert_allclose(norms[success], lp(x_adv - points, 2)[success], rtol=1e-6)


def test_more_targets_than_other_classes_means_all_of_them(mlp, points):
    labels = mlp.predict(points, verbose=0).argmax(axis=1)
    many = fab_run(mlp, points, labels, targeted=True, n_target_classes=9, steps=3, clip_values=(0, 1))
    three = fab_run(mlp, points, labels, targeted=True, n_target_classes=3, steps=3, clip_values=(0, 1))
    np.testing.assert_array_equal(many[1], three[1])  # as APGD-T: C - 1 targets at most
