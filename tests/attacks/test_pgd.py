"""FGSM, BIM and PGD (`gradkit.attacks.pgd`) on every backend: the threat model's properties on a trained
model, hand-computed steps of linear models, labels, several inputs and outputs, inference mode, seeded
starts, the device loop against the numpy one, ensembles and their objectives, bad input."""

import warnings

import keras
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier

import gradkit
from gradkit import attacks as _base
from gradkit.attacks import decide, geometry
from helpers.models import LOGITS_CE, accuracy, loud_ensemble, random_images, small_cnn

from conftest import ball, set_weights_from

ATTACKS = {
    "fgsm": lambda m, x, y, eps, **kw: gradkit.fgsm(m, x, y, eps=eps, **kw),
    "bim": lambda m, x, y, eps, **kw: gradkit.bim(m, x, y, eps=eps, eps_step=eps / 2 or 0.05, steps=5, **kw),
    "pgd": lambda m, x, y, eps, **kw: gradkit.pgd(
        m, x, y, eps=eps, eps_step=eps / 2 or 0.05, steps=5, seed=0, **kw
    ),
}


def distance(a, b, norm):
    d = (a - b).reshape(len(a), -1).astype(np.float64)
    return np.abs(d).max(axis=1) if norm == np.inf else np.sqrt((d**2).sum(axis=1))


@pytest.fixture(scope="module")
def digits():
    """An MLP 64-32-10 trained on sklearn digits (pixels / 16) and 200 held-out images.

    It is trained for 30 epochs by scikit-learn (fast, and the same weights on every backend), then
    copied into a Keras model with a logits output.
    """
    data = load_digits()
    x, y = (data.images / 16).reshape(-1, 64).astype(np.float32), data.target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier((32,), learning_rate_init=0.01, max_iter=30, random_state=0).fit(
            x[:1500], y[:1500]
        )
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )
    model.set_weights([w for pair in zip(mlp.coefs_, mlp.intercepts_) for w in pair])
    model.compile(loss=LOGITS_CE)
    return model, x[1500:1700], y[1500:1700]


def tanh_model(seed=3):
    """Input(4) -> Dense(6, tanh) -> Dense(3) logits, deterministic weights (labels, hand gradients)."""
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(6, activation="tanh")(inp)))
    set_weights_from(model, seed=seed)
    model.compile(loss=LOGITS_CE)
    return model


def numpy_gradient(model, x, y):
    """Hand-written float64 backward pass of the summed cross-entropy of `tanh_model`."""
    w1, b1, w2, b2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return (((p - np.eye(3)[y]) @ w2.T) * (1 - h**2)) @ w1.T


@pytest.mark.parametrize("name", sorted(ATTACKS))
@pytest.mark.parametrize("norm,eps", [(np.inf, 0.1), (2, 1.0)])
def test_properties_on_trained_digits(digits, name, norm, eps):
    model, x, y = digits
    attack = ATTACKS[name]
    same = attack(model, x, y, 0.0, norm=norm, clip_values=(0, 1))
    assert same is not x and same.dtype == np.float32 and np.array_equal(same, x)
    x_adv = attack(model, x, y, eps, norm=norm, clip_values=(0, 1))
    assert x_adv.shape == x.shape and np.all(np.isfinite(x_adv))
    assert distance(x_adv, x, norm).max() <= eps + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    clean = accuracy(model, x, y)
    assert clean > 0.75
    assert accuracy(model, x_adv, y) < clean - 0.25


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_targeted_success_rises(digits, name):
    model, x, _ = digits
    target = (model.predict(x, verbose=0).argmax(axis=1) + 1) % 10
    x_adv = ATTACKS[name](model, x, target, 0.2, clip_values=(0, 1), targeted=True)
    before, after = accuracy(model, x, target), accuracy(model, x_adv, target)
    assert before == 0.0 and after > 0.2
    assert distance(x_adv, x, np.inf).max() <= 0.2 + 1e-6


def sign_model():
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.array([[0, 1], [0, -1]], np.float32), np.zeros(2, np.float32)])
    model.compile(loss=LOGITS_CE)
    return model


def test_projection_is_around_the_clean_input_and_inside_the_range():
    model, x0, y = sign_model(), np.array([[0.5, 0.5], [0.95, 0.02]], np.float32), [0, 0]
    kw = dict(eps=0.1, eps_step=0.05, steps=10, clip_values=(0, 1), keep="last")
    x_bim = gradkit.bim(model, x0, y, **kw)
    np.testing.assert_allclose(x_bim, [[0.6, 0.4], [1.0, 0.0]], atol=1e-7)
    assert distance(x_bim, x0, np.inf).max() <= 0.1 + 1e-6 and x_bim.min() >= 0 and x_bim.max() <= 1
    np.testing.assert_array_equal(gradkit.pgd(model, x0, y, random_start=False, **kw), x_bim)
    one_step = gradkit.bim(model, x0, y, eps=0.1, eps_step=0.1, steps=1, clip_values=(0, 1), keep="last")
    np.testing.assert_array_equal(gradkit.fgsm(model, x0, y, eps=0.1, clip_values=(0, 1)), one_step)
    # L2: one step of 0.1 along (1, -1)/sqrt(2), then projected and clipped.
    x_l2 = gradkit.fgsm(model, x0[:1], y[:1], eps=0.1, norm="l2")
    np.testing.assert_allclose(x_l2, [[0.5 + 0.1 / np.sqrt(2), 0.5 - 0.1 / np.sqrt(2)]], atol=1e-7)


def test_iterative_attacks_keep_the_first_iterate_that_fools_the_model():
    # z1 - z0 = x0 - x1: both samples are fooled after one step (sample 1 was misclassified already,
    # the clean start is not judged); later steps only push further, so "first_success" stops there.
    model, x0, y = sign_model(), np.array([[0.5, 0.5], [0.95, 0.02]], np.float32), [0, 0]
    for attack in (gradkit.bim, gradkit.pgd):
        kw = dict(random_start=False) if attack is gradkit.pgd else {}
        x_adv = attack(model, x0, y, eps=0.1, eps_step=0.05, steps=10, clip_values=(0, 1), **kw)
        np.testing.assert_allclose(x_adv, [[0.55, 0.45], [1.0, 0.0]], atol=1e-7)
    with pytest.raises(ValueError, match="`keep` must be one of"):
        gradkit.bim(model, x0, y, eps=0.1, eps_step=0.05, steps=2, keep="best")


def test_labels_default_to_hard_predictions_and_soft_labels_are_rejected():
    model = tanh_model()
    x = np.random.RandomState(0).rand(3, 4).astype(np.float32)
    pred = model.predict(x, verbose=0).argmax(axis=1)
    x_adv = gradkit.fgsm(model, x, eps=0.1)
    np.testing.assert_allclose(np.abs(x_adv - x), 0.1, rtol=1e-5)  # every sign component is non-zero
    np.testing.assert_array_equal(x_adv, gradkit.fgsm(model, x, pred, eps=0.1))
    soft = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(x, verbose=0)))
    with pytest.raises(ValueError, match="soft probability"):
        gradkit.pgd(model, x, soft, eps=0.1, eps_step=0.01, steps=2)


def test_fgsm_equals_the_sign_of_a_hand_written_gradient():
    model = tanh_model()
    x = np.random.RandomState(0).rand(8, 4).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    expected = np.clip(x + np.float32(0.1) * np.sign(numpy_gradient(model, x, y)).astype(np.float32), 0, 1)
    np.testing.assert_array_equal(gradkit.fgsm(model, x, y, eps=0.1, clip_values=(0, 1)), ball(expected, x))
    targeted = np.clip(x - np.float32(0.1) * np.sign(numpy_gradient(model, x, y)).astype(np.float32), 0, 1)
    np.testing.assert_array_equal(
        gradkit.fgsm(model, x, y, eps=0.1, clip_values=(0, 1), targeted=True), ball(targeted, x)
    )


def two_inputs_two_heads():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(4, activation="tanh")(keras.layers.Concatenate()([a, b]))
    cls, aux = keras.layers.Dense(3, name="cls")(hidden), keras.layers.Dense(1, name="aux")(hidden)
    model = set_weights_from(keras.Model([a, b], [cls, aux]), seed=5)
    return model, keras.Model([a, b], cls)


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_several_inputs_each_in_its_own_ball_and_the_chosen_output(norm):
    model, cls_only = two_inputs_two_heads()
    rng = np.random.RandomState(1)
    xa, xb, y = rng.rand(6, 3).astype(np.float32), rng.rand(6, 2).astype(np.float32), rng.randint(0, 3, 6)
    kw = dict(eps=0.3, eps_step=0.3, steps=4, norm=norm, loss=LOGITS_CE, random_start=False)
    adv = gradkit.pgd(model, [xa, xb], y, output="cls", **kw)
    assert isinstance(adv, list) and adv[0].shape == (6, 3) and adv[1].shape == (6, 2)
    for new, old in zip(adv, [xa, xb]):  # each input is projected onto its own ball, and reaches it
        np.testing.assert_allclose(distance(new, old, norm), 0.3, rtol=1e-5)
    as_dict = gradkit.pgd(model, {"b": xb, "a": xa}, y, output=0, **kw)
    np.testing.assert_array_equal(as_dict["a"], adv[0])
    np.testing.assert_array_equal(as_dict["b"], adv[1])
    alone = gradkit.pgd(cls_only, [xa, xb], y, **kw)  # only the chosen head's loss counts
    np.testing.assert_allclose(alone[0], adv[0], atol=1e-6)
    np.testing.assert_allclose(alone[1], adv[1], atol=1e-6)
    with pytest.raises(ValueError, match="nope"):
        gradkit.fgsm(model, [xa, xb], y, eps=0.1, loss=LOGITS_CE, output="nope")
    with pytest.raises(ValueError, match="output="):
        gradkit.fgsm(model, [xa, xb], y, eps=0.1, loss=LOGITS_CE)


def dropout_batchnorm_model():
    inp = keras.Input((4,))
    hidden = keras.layers.Dropout(0.5)(keras.layers.Dense(8, activation="relu")(inp))
    out = keras.layers.Dense(3)(keras.layers.BatchNormalization()(hidden))
    model = set_weights_from(keras.Model(inp, out), seed=2)
    bn = model.layers[-2]
    bn.moving_variance.assign(np.abs(keras.ops.convert_to_numpy(bn.moving_variance)) + 0.5)
    model.compile(loss=LOGITS_CE)
    return model


def test_inference_mode_leaves_every_variable_unchanged_and_seeded_runs_repeat():
    model = dropout_batchnorm_model()
    x, y = np.linspace(-1, 1, 8).reshape(2, 4).astype(np.float32), [0, 2]
    before = [keras.ops.convert_to_numpy(v).copy() for v in model.variables]
    kw = dict(eps=0.2, eps_step=0.05, steps=5, seed=3)
    first = gradkit.pgd(model, x, y, **kw)
    np.testing.assert_array_equal(gradkit.pgd(model, x, y, **kw), first)
    assert not np.array_equal(gradkit.pgd(model, x, y, **{**kw, "seed": 4}), first)
    gradkit.pgd(model, x, None, norm=2, **kw)
    for old, var in zip(before, model.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(var), old, err_msg=var.path)


def test_seeded_random_start_is_numpy_uniform_in_the_ball():
    inp = keras.Input((2,))  # all ReLUs dead: zero gradient, so PGD stays at its random start
    dead = keras.layers.Dense(2, activation="relu", bias_initializer=keras.initializers.Constant(-10.0))(inp)
    model = keras.Model(inp, keras.layers.Dense(2)(dead))
    model.compile(loss=LOGITS_CE)
    x, y = np.full((4000, 2), 0.5, np.float32), np.zeros(4000, int)
    linf = gradkit.pgd(model, x, y, eps=0.2, eps_step=0.1, steps=2, seed=7)
    drawn = x + np.random.RandomState(7).uniform(-0.2, 0.2, x.shape).astype(np.float32)
    np.testing.assert_allclose(linf, drawn, atol=1e-7)
    l2 = gradkit.pgd(model, x, y, eps=0.2, eps_step=0.1, steps=2, norm=2, seed=7)
    radius = distance(l2, x, 2)
    assert np.all(np.isfinite(l2)) and radius.max() <= 0.2 + 1e-6
    assert abs(np.mean((radius / 0.2) ** 2) - 0.5) < 0.02  # uniform in the disc: (r/eps)^d ~ U(0, 1)
    np.testing.assert_array_equal(
        gradkit.bim(model, x[:5], y[:5], eps=0.2, eps_step=0.1, steps=3, norm=2), x[:5]
    )


def test_pgd_without_random_start_equals_bim_and_fgsm_is_one_bim_step():
    model = tanh_model()
    x, y = np.random.RandomState(2).rand(10, 4).astype(np.float32), np.arange(10) % 3
    for norm in (np.inf, 2):
        kw = dict(eps=0.3, eps_step=0.04, steps=9, norm=norm, clip_values=(0, 1))
        np.testing.assert_array_equal(
            gradkit.pgd(model, x, y, random_start=False, **kw), gradkit.bim(model, x, y, **kw)
        )
        one = gradkit.bim(model, x, y, eps=0.3, eps_step=0.3, steps=1, norm=norm)
        np.testing.assert_array_equal(gradkit.fgsm(model, x, y, eps=0.3, norm=norm), one)


def test_ensemble_linearity_and_hard_vote_labels():
    first, second = tanh_model(3), tanh_model(4)
    x = np.random.RandomState(3).rand(10, 4).astype(np.float32)
    kw = dict(eps=0.1, eps_step=0.02, steps=6, random_start=False)
    ens = gradkit.WeightedEnsemble([first, second], [1.0, 0.0])
    np.testing.assert_array_equal(gradkit.pgd(ens, x, **kw), gradkit.pgd(first, x, **kw))

    class Fitted:  # a boosting estimator hands its ensemble over with as_ensemble()
        def as_ensemble(self):
            return ens

    np.testing.assert_array_equal(gradkit.pgd(Fitted(), x, **kw), gradkit.pgd(first, x, **kw))
    y = np.arange(10) % 3
    half = gradkit.WeightedEnsemble([first, second], [0.5, 0.5])
    grad = numpy_gradient(first, x, y) + numpy_gradient(second, x, y)
    expected = x + np.float32(0.1) * np.sign(grad).astype(np.float32)
    np.testing.assert_array_equal(gradkit.fgsm(half, x, y, eps=0.1), ball(expected, x))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(eps=-0.1), ValueError, r"`eps` must be >= 0. Received: eps=-0.1"),
        (dict(eps_step=0.0), ValueError, "`eps_step` must be > 0"),
        (dict(eps_step=None), TypeError, "`eps_step` must be a finite number"),
        (dict(steps=0), ValueError, "`steps` must be an integer >= 1"),
        (dict(steps=2.5), TypeError, "`steps` must be an integer"),
        (dict(norm=3), ValueError, "`norm` must be"),
        (dict(clip_values=(1, 0)), ValueError, "min <= max"),
        (dict(clip_values=(0,)), ValueError, "pair"),
        (dict(clip_values=(0.2, 1)), ValueError, "inside clip_values"),
        (dict(y=[0, 3]), ValueError, "outside"),
        (dict(y=[[0.5, 0.5, 0.0], [0, 0, 1]]), ValueError, "soft"),
        (dict(y=None, targeted=True), ValueError, "targeted"),
        (dict(seed=-1), ValueError, "`seed`"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs, error, match):
    model = tanh_model()
    call = dict(y=[0, 1], eps=0.1, eps_step=0.05, steps=3, clip_values=(0, 1))
    call.update(kwargs)
    x = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], np.float32)
    with pytest.raises(error, match=match):
        gradkit.pgd(model, x, call.pop("y"), **call)
    assert _base.gradient_for(model).trace_count == 0


def test_integer_inputs_rejected():
    inp = keras.Input((3,), dtype="int32")
    emb = keras.layers.Flatten()(keras.layers.Embedding(10, 4)(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(emb))
    model.compile(loss=LOGITS_CE)
    with pytest.raises(TypeError, match="floating input"):
        gradkit.fgsm(model, np.array([[1, 2, 3]], np.int32), [1], eps=0.1)


def test_norm_spellings():
    model = tanh_model()
    x, y = np.random.RandomState(4).rand(3, 4).astype(np.float32), [0, 1, 2]
    for a, b in [(np.inf, "linf"), ("inf", float("inf")), (2, "L2"), (2.0, "l2")]:
        np.testing.assert_array_equal(
            gradkit.fgsm(model, x, y, eps=0.1, norm=a), gradkit.fgsm(model, x, y, eps=0.1, norm=b)
        )


def test_one_pgd_step_size_default_everywhere(monkeypatch):
    """PGD's default step, 2.5 * eps / steps (1.0 at eps 0), comes from one function: the registry, the
    robustness curve, the study's boosting rounds and adversarial training all use it."""
    from gradkit.attacks import default_eps_step
    from gradkit.study import make_config
    from gradkit.study._config import StudyConfig
    from gradkit.study._train import adversarial
    from gradkit.training._settings import _default_eps_step

    assert default_eps_step(0.1, 10) == pytest.approx(0.025) and default_eps_step(0.0, 10) == 1.0
    with pytest.raises(ValueError, match="`eps` must be"):
        default_eps_step(-0.1, 10)
    with pytest.raises(ValueError, match="`steps` must be an integer >= 1"):
        default_eps_step(0.1, 0)
    config = StudyConfig(**{**make_config(), "adv_eps": 0.3, "adv_steps": 6})
    assert adversarial(config)["eps_step"] == pytest.approx(0.125)
    assert _default_eps_step("pgd", 0.2, 4, True) == pytest.approx(0.125)


def numpy_pgd(model, x, y, eps, eps_step, steps, norm):
    """Classic PGD (keep="last", no random start) with gradkit's numpy geometry and InputGradient."""
    x_adv = x.copy()
    for _ in range(steps):
        g = gradkit.input_gradient(model, x_adv, y, loss=LOGITS_CE)
        if norm == 1:  # the steepest L1 step inside the box [0, 1]
            moved = x_adv + geometry.steepest_l1(g, eps_step, -x_adv, 1 - x_adv)
        else:
            moved = x_adv + np.float32(eps_step) * geometry.direction(g, norm)
        x_adv = geometry.project_and_clip(moved, x, eps, norm, (0.0, 1.0))
    return x_adv


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_device_steps_equal_the_numpy_loop(norm):
    model, (x, y) = small_cnn(), random_images()
    eps = 0.1 if norm == np.inf else 0.5
    adv = gradkit.bim(
        model, x, y, eps=eps, eps_step=eps / 4, steps=6, norm=norm, clip_values=(0, 1), keep="last"
    )
    np.testing.assert_allclose(adv, numpy_pgd(model, x, y, eps, eps / 4, 6, norm), atol=2e-6)


def test_vote_margin_follows_a_vote_that_the_loss_sum_cannot_see():
    # Weights 0.6 / 0.4: the first member alone decides the hard vote (class 1 iff x0 > 0.5). The second
    # (z1 = 30 - 50 x0) is saturated on class 1, yet its cross-entropy gradient is 50x larger and points
    # the other way, so the loss_sum steps move x0 down and never change the vote; the margin of the
    # smoothed vote follows the deciding member and flips the vote.
    inp = keras.Input((2,))
    deciding = keras.Model(inp, keras.layers.Dense(2)(inp))
    deciding.set_weights([np.array([[0.0, 1.0], [0.0, 0.0]], "float32"), np.array([0.0, -0.5], "float32")])
    loud = keras.Model(inp, keras.layers.Dense(2)(inp))
    loud.set_weights([np.array([[0.0, -50.0], [0.0, 0.0]], "float32"), np.array([0.0, 30.0], "float32")])
    for member in (deciding, loud):
        member.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ens = gradkit.WeightedEnsemble([deciding, loud], [0.6, 0.4])
    x, y = np.array([[0.45, 0.5]], "float32"), np.array([0])
    assert decide(ens, x)[0] == 0
    kw = dict(eps=0.1, eps_step=0.05, steps=4, clip_values=(0, 1), random_start=False)
    assert decide(ens, gradkit.pgd(ens, x, y, objective="loss_sum", **kw))[0] == 0
    fooled = gradkit.pgd(ens, x, y, objective="vote_margin", **kw)
    assert decide(ens, fooled)[0] == 1
    np.testing.assert_allclose(fooled, [[0.55, 0.5]], atol=1e-6)  # the first iterate that fooled the vote


def test_a_point_fooled_mid_run_keeps_the_fooling_example():
    # Linf PGD from x0 = 0.47 with steps of 0.05 on the deciding member alone: x0 = 0.52 fools it at
    # step 1 (class 1); the fooled point is returned even though later steps would only move on.
    ens = loud_ensemble()
    x, y = np.array([[0.47, 0.5]], "float32"), np.array([0])
    adv = gradkit.pgd(ens, x, y, eps=0.2, eps_step=0.05, steps=6, clip_values=(0, 1), random_start=False,
                      objective="vote_margin")  # fmt: skip
    np.testing.assert_allclose(adv, [[0.52, 0.5]], atol=1e-6)


L1_W = np.array([1.5, -0.5, 0.25, 0.1], np.float32)  # the logit gap z0 - z1 of `l1_linear`


def l1_linear(bias):
    """Input(4) -> Dense(2) logits with z0 - z1 = L1_W . x + bias (z1 = 0): linear, so its L1 worst
    case has a closed form."""
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.stack([L1_W, np.zeros(4, np.float32)], 1), np.array([bias, 0.0], np.float32)])
    model.compile(loss=LOGITS_CE)
    return model


@pytest.mark.parametrize("name", ["fgsm", "bim"])
def test_l1_step_is_the_steepest_ascent_and_reaches_the_exact_worst_case(name):
    """On a linear model a perturbation of L1 norm eps lowers the margin m by at most eps * max|w|
    (Hoelder: the dual of L1 is Linf), reached by all of eps on the coordinate of largest |w|: the
    robust accuracy is the share of points with m / max|w| > eps, 0.10 here; the step eps * g / ||g||_1
    lowers it only by eps * ||w||_2^2 / ||w||_1 and leaves 0.28."""
    x = np.random.RandomState(0).uniform(0.3, 0.7, (50, 4)).astype(np.float32)
    bias = -float((x.astype(np.float64) @ L1_W).mean())
    model, eps = l1_linear(bias), 0.2
    margin = np.abs(x.astype(np.float64) @ L1_W + bias)
    y = (x @ L1_W + bias < 0).astype(int)  # clean accuracy 1
    assert np.abs(margin / 1.5 - eps).min() > 1e-3  # no point within rounding of the threshold
    exact = np.mean(margin / np.abs(L1_W).max() > eps)
    spread = np.mean(margin * np.abs(L1_W).sum() / np.square(L1_W).sum() > eps)
    assert (exact, spread) == (0.1, 0.28)
    kw = {} if name == "fgsm" else dict(eps_step=eps / 4, steps=4)
    adv = getattr(gradkit, name)(model, x, y, eps=eps, norm=1, clip_values=(0, 1), **kw)
    assert accuracy(model, adv, y) == exact
    delta = (adv - x).astype(np.float64)
    assert np.abs(delta).sum(axis=1).max() <= eps
    assert np.all(delta[:, 1:] == 0)  # only coordinate 0 moves, down the margin
    assert np.all(np.sign(delta[:, 0]) == np.where(y == 0, -1.0, 1.0))
    if name == "fgsm":  # all of eps (BIM keeps the first iterate that fools the model)
        np.testing.assert_allclose(np.abs(delta[:, 0]), eps, rtol=1e-5)


def test_l1_step_inside_the_box_passes_the_rest_to_the_next_coordinate():
    """x0[0] = 0.05 may fall by 0.05 only: the steepest step inside [0, 1] (a fractional knapsack in
    decreasing |w|) spends the other 0.15 on coordinate 1 (|w| = 0.5, rising): [0, 0.55, 0.5, 0.5]."""
    model, x0 = l1_linear(0.0), np.array([[0.05, 0.4, 0.5, 0.5]], np.float32)
    adv = gradkit.fgsm(model, x0, [0], eps=0.2, norm=1, clip_values=(0, 1))
    np.testing.assert_allclose(adv, [[0.0, 0.55, 0.5, 0.5]], atol=1e-6)
    targeted = gradkit.fgsm(model, x0, [1], eps=0.2, norm=1, clip_values=(0, 1), targeted=True)
    np.testing.assert_allclose(targeted, adv, atol=1e-6)  # descending the target's loss: the same step
    free = gradkit.fgsm(model, x0, [0], eps=0.2, norm=1)  # no box: all on coordinate 0
    np.testing.assert_allclose(free, [[-0.15, 0.4, 0.5, 0.5]], atol=1e-6)
    host = gradkit.WeightedEnsemble([model], [1.0], normalize_gradients=True)  # the host loop
    on_host = gradkit.fgsm(host, x0, [0], eps=0.2, norm=1, clip_values=(0, 1))
    np.testing.assert_allclose(on_host, adv, atol=1e-6)


def test_l1_device_steps_equal_the_numpy_loop():
    model, (x, y) = small_cnn(), random_images()
    adv = gradkit.bim(model, x, y, eps=2.0, eps_step=0.5, steps=6, norm=1, clip_values=(0, 1), keep="last")
    np.testing.assert_allclose(adv, numpy_pgd(model, x, y, 2.0, 0.5, 6, 1), atol=2e-6)
