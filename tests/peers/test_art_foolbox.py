"""Agreement with ART 1.20 and foolbox 3.3 on the same Keras model and data (FGSM, PGD in Linf and L2;
FGSM in L1, where ART takes the steepest step and foolbox a weaker one).

The peers run on TensorFlow only (ART's TensorFlowV2Classifier and foolbox's TensorFlowModel take a TF
callable), so this module is skipped on the other backends; there, test_attacks.py compares FGSM with a
hand-written numpy gradient instead.
"""

import keras
import numpy as np
import pytest

from conftest import BACKEND, set_weights_from

if BACKEND != "tensorflow":
    pytest.skip(
        "ART and foolbox wrap TensorFlow models; peer agreement is checked on the TensorFlow backend",
        allow_module_level=True,
    )

import foolbox  # noqa: E402
from art.attacks.evasion import FastGradientMethod, ProjectedGradientDescent  # noqa: E402
from art.estimators.classification import TensorFlowV2Classifier  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import gradkit  # noqa: E402

from conftest import ball  # noqa: E402

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def tanh_model():
    """A logits model Input(4) -> Dense(6, tanh) -> Dense(3)."""
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(6, activation="tanh")(inp)))
    set_weights_from(model, seed=3)
    model.compile(loss=LOGITS_CE)
    return model


def art_classifier(model, clip_values=(0, 1)):
    shape, classes = tuple(model.input_shape[1:]), model.output_shape[-1]
    return TensorFlowV2Classifier(
        model, nb_classes=classes, input_shape=shape, loss_object=LOGITS_CE, clip_values=clip_values
    )


def foolbox_attack(attack, model, x, y, eps, targeted=False):
    labels = keras.ops.convert_to_tensor(y)
    criterion = foolbox.criteria.TargetedMisclassification(labels) if targeted else labels
    _, adv, _ = attack(
        foolbox.TensorFlowModel(model, bounds=(0, 1)), keras.ops.convert_to_tensor(x), criterion, epsilons=eps
    )
    return adv.numpy()


@pytest.fixture(scope="module")
def tanh_data():
    x = np.random.RandomState(0).rand(50, 4).astype(np.float32)
    return x, np.arange(50) % 3


def test_fgsm_equals_art_and_foolbox_exactly(tanh_data):
    model, (x, y) = tanh_model(), tanh_data
    ours = gradkit.fgsm(model, x, y, eps=0.1, clip_values=(0, 1))
    art = FastGradientMethod(art_classifier(model), eps=0.1, batch_size=len(x)).generate(x, y)
    np.testing.assert_array_equal(ours, ball(art, x))
    np.testing.assert_array_equal(ours, ball(foolbox_attack(foolbox.attacks.FGSM(), model, x, y, 0.1), x))
    assert np.abs(ours - x).max() > 0.09  # it did move


@pytest.mark.parametrize("targeted", [False, True])
def test_linf_pgd_equals_art_and_foolbox_exactly(tanh_data, targeted):
    model, (x, y) = tanh_model(), tanh_data
    ours = gradkit.pgd(
        model,
        x,
        y,
        eps=0.1,
        eps_step=0.025,
        steps=10,
        clip_values=(0, 1),
        keep="last",  # the peers return the last iterate
        targeted=targeted,
        random_start=False,
    )
    art = ProjectedGradientDescent(
        art_classifier(model), eps=0.1, eps_step=0.025, max_iter=10, num_random_init=0,
        targeted=targeted, batch_size=len(x), verbose=False,
    ).generate(x, y)  # fmt: skip
    np.testing.assert_array_equal(ours, ball(art, x))
    pgd = foolbox.attacks.LinfPGD(abs_stepsize=0.025, steps=10, random_start=False)
    np.testing.assert_array_equal(ours, ball(foolbox_attack(pgd, model, x, y, 0.1, targeted), x))


def test_l2_pgd_agrees_with_art_and_foolbox(tanh_data):
    model, (x, y) = tanh_model(), tanh_data
    kw = dict(eps=0.3, eps_step=0.075, steps=10, norm=2, random_start=False, keep="last")
    # foolbox also projects onto the ball and then clips to the box: equal up to float32 rounding of norms.
    ours = gradkit.pgd(model, x, y, clip_values=(0, 1), **kw)
    pgd = foolbox.attacks.L2PGD(abs_stepsize=0.075, steps=10, random_start=False)
    np.testing.assert_allclose(ours, foolbox_attack(pgd, model, x, y, 0.3), atol=1e-6)
    # ART clips to the box BEFORE projecting (a different point once both bind), so compare unclipped.
    ours = gradkit.pgd(model, x, y, **kw)
    art = ProjectedGradientDescent(
        art_classifier(model, None), norm=2, eps=0.3, eps_step=0.075, max_iter=10, num_random_init=0,
        batch_size=len(x), verbose=False,
    ).generate(x, y)  # fmt: skip
    np.testing.assert_allclose(ours, art, atol=1e-6)
    fgm = FastGradientMethod(art_classifier(model, None), norm=2, eps=0.3, batch_size=len(x)).generate(x, y)
    np.testing.assert_allclose(gradkit.fgsm(model, x, y, eps=0.3, norm=2), fgm, atol=1e-6)


def test_cnn_on_digits_pgd_equals_art_and_foolbox():
    data = load_digits()
    x, y = (data.images[:300] / 16).astype(np.float32)[..., None], data.target[:300]
    keras.utils.set_random_seed(0)
    cnn = keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, activation="relu"), keras.layers.Flatten(),
         keras.layers.Dense(10)]
    )  # fmt: skip
    cnn.compile(loss=LOGITS_CE)
    ours = gradkit.pgd(
        cnn,
        x,
        y,
        eps=0.1,
        eps_step=0.025,
        steps=10,
        clip_values=(0, 1),
        random_start=False,
        keep="last",
    )
    art = ProjectedGradientDescent(
        art_classifier(cnn), eps=0.1, eps_step=0.025, max_iter=10, num_random_init=0, batch_size=300,
        verbose=False,
    ).generate(x, y)  # fmt: skip
    np.testing.assert_array_equal(ours, ball(art, x))
    pgd = foolbox.attacks.LinfPGD(abs_stepsize=0.025, steps=10, random_start=False)
    np.testing.assert_array_equal(ours, ball(foolbox_attack(pgd, cnn, x, y, 0.1), x))


def test_l1_fgsm_equals_arts_fixed_steepest_step_and_beats_foolboxs_spread_step(tanh_data):
    """ART 1.20's FastGradientMethod(norm=1) puts all of eps on the coordinate of largest |g| (fixed
    in ART PR #2382), as gradkit does; foolbox 3.3's L1 FGM moves eps * g / ||g||_1, a weaker step."""
    model, (x, y) = tanh_model(), tanh_data
    x = (0.2 + 0.6 * x).astype(np.float32)  # one step of 0.15 never reaches the box
    ours = gradkit.fgsm(model, x, y, eps=0.15, norm=1, clip_values=(0, 1))
    art = FastGradientMethod(art_classifier(model), norm=1, eps=0.15, batch_size=len(x)).generate(x, y)
    from gradkit.attacks.geometry import inside

    np.testing.assert_allclose(ours, inside(art.astype(np.float32), x, 0.15, 1), atol=1e-7)
    assert np.count_nonzero(ours - x, axis=1).max() == 1
    spread = foolbox_attack(foolbox.attacks.L1FastGradientAttack(), model, x, y, 0.15)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    gain = [np.asarray(loss(y, model(a))) for a in (ours, spread)]
    assert np.all(gain[0] >= gain[1] - 1e-6) and np.mean(gain[0] > gain[1] + 1e-4) > 0.9
