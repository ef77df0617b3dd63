"""robustness_curve on every backend: clean accuracy at eps=0, one trace for all epsilons, zero gradients."""

import warnings

import keras
import numpy as np
import pytest

import gradkit
from gradkit import attacks as _base

from conftest import set_weights_from

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def tanh_model(seed=3):
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(6, activation="tanh")(inp)))
    set_weights_from(model, seed=seed, scale=1.5)
    model.compile(loss=LOGITS_CE)
    return model


@pytest.fixture
def data():
    x = np.random.RandomState(0).rand(60, 4).astype(np.float32)
    model = tanh_model()
    y = model.predict(x, verbose=0).argmax(axis=1)
    y[:15] = (y[:15] + 1) % 3  # a quarter is misclassified: clean accuracy 0.75
    return model, x, y


def test_curve_values_and_one_trace_for_all_epsilons(data):
    model, x, y = data
    epsilons = [0.0, 0.05, 0.1, 0.3]
    curve = gradkit.robustness_curve(
        model, x, y, attack="pgd", epsilons=epsilons, steps=5, clip_values=(0, 1), seed=0
    )
    assert curve["eps"] == epsilons and curve["accuracy"][0] == 0.75
    assert curve["zero_gradient_fraction"] == 0.0
    acc = np.asarray(curve["accuracy"])
    assert np.all(np.diff(acc) <= 0.02) and acc[-1] < 0.3
    for eps, value in zip(epsilons[1:], acc[1:]):  # eps_step=None means 2.5 * eps / steps
        adv = gradkit.pgd(model, x, y, eps=eps, eps_step=2.5 * eps / 5, steps=5, clip_values=(0, 1), seed=0)
        assert value == np.mean(model.predict(adv, verbose=0).argmax(axis=1) == y)
    grad = _base.gradient_for(model)
    assert grad.trace_count == 1
    gradkit.robustness_curve(model, x, y, attack="bim", epsilons=[0.2, 0.1], steps=3, eps_step=0.05)
    gradkit.robustness_curve(model, x, y, attack="fgsm", epsilons=[0.2, 0.4], norm=2)
    assert grad.trace_count == 1


def test_zero_gradient_fraction_is_hand_computed():
    inp = keras.Input((1,))  # ReLU dead for x < 0: those samples have an exactly zero input gradient
    hidden = keras.layers.Dense(1, activation="relu")(inp)
    model = keras.Model(inp, keras.layers.Dense(2)(hidden))
    model.set_weights([np.ones((1, 1)), np.zeros(1), np.array([[1.0, -1.0]]), np.array([0.0, 0.5])])
    model.compile(loss=LOGITS_CE)
    x, y = np.array([[-1.0], [-0.5], [0.5], [1.0]], np.float32), np.array([1, 1, 0, 0])
    curve = gradkit.robustness_curve(model, x, y, attack="fgsm", epsilons=[0, 0.1, 2.0])
    assert curve["zero_gradient_fraction"] == 0.5
    # Logits (h, 0.5 - h), h = relu(x): class 1 where h < 0.25. The live samples (0.5, 1.0) survive eps 0.1
    # and fall at eps 2; the dead ones cannot move, so half the accuracy left is a no-op, not robustness.
    assert curve["accuracy"] == [1.0, 1.0, 0.5]


def test_callable_attack_and_ensemble():
    first, second = tanh_model(3), tanh_model(4)
    ens = gradkit.WeightedEnsemble([first, second], [0.7, 0.3])
    x = np.random.RandomState(1).rand(40, 4).astype(np.float32)
    y = np.arange(40) % 3
    calls = []

    def attack(model, x_, y_, *, eps, norm):
        calls.append((eps, norm))
        return gradkit.fgsm(model, x_, y_, eps=eps, norm=norm)

    by_name = gradkit.robustness_curve(ens, x, y, attack="fgsm", epsilons=[0, 0.2], norm=2)
    by_callable = gradkit.robustness_curve(ens, x, y, attack=attack, epsilons=[0, 0.2], norm=2)
    assert by_name == by_callable and calls == [(0.2, 2)]
    assert by_name["accuracy"][0] == np.mean(ens.predict(x) == y)  # weighted hard vote

    def doubled(model, x_, y_, *, eps, norm):  # outside the eps-ball: refused, as `evaluate` refuses it
        return gradkit.fgsm(model, x_, y_, eps=2 * eps, norm=norm)

    for norm in (2, np.inf):
        with pytest.raises(ValueError, match="'doubled' must return examples inside the eps-ball"):
            gradkit.robustness_curve(ens, x, y, attack=doubled, epsilons=[0, 0.1], norm=norm)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(attack="cw"), ValueError, "`attack` must be"),
        (dict(epsilons=[]), ValueError, "non-empty"),
        (dict(epsilons=[0.1, -0.1]), ValueError, "`epsilons` must be >= 0"),
        (dict(attack="pgd"), ValueError, "`steps` is required"),
        (dict(eps=0.1), ValueError, "epsilons="),
        (dict(norm=3), ValueError, "`norm` must be"),
        (dict(steps=3), TypeError, "steps"),
        (dict(y=None), ValueError, "`y`"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs, error, match):
    model = tanh_model()
    call = dict(y=[0, 1], attack="fgsm", epsilons=[0, 0.1])
    call.update(kwargs)
    with pytest.raises(error, match=match):
        gradkit.robustness_curve(model, np.full((2, 4), 0.5, np.float32), call.pop("y"), **call)
    assert _base.gradient_for(model).trace_count == 0


def _bump_model():
    """1-D: class 1 (wrong) only in the band |x - 0.55| < 0.05, class 0 elsewhere; at x = 0.48 the
    cross-entropy gradient points into the band. FGSM at eps 0.07 lands in it, at 0.2 beyond it."""
    inp = keras.Input((1,))
    shift = keras.layers.Dense(1)
    square = keras.layers.Lambda(lambda t: keras.ops.square(t))
    head = keras.layers.Dense(2)
    model = keras.Model(inp, head(square(shift(inp))))
    shift.set_weights([np.ones((1, 1), "float32"), np.array([-0.55], "float32")])
    head.set_weights([np.array([[0.0, -100.0]], "float32"), np.array([0.0, 0.25], "float32")])
    return model


def test_a_curve_never_rises_and_says_when_the_attack_did():
    model = _bump_model()
    x, y = np.array([[0.48], [0.47]], "float32"), np.array([0, 0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve = gradkit.robustness_curve(model, x, y, attack="fgsm", epsilons=[0.2, 0.0, 0.07])
    assert curve["attack_accuracy"] == [1.0, 1.0, 0.0]  # FGSM alone: 0.0 at 0.07, 1.0 at 0.2
    assert curve["accuracy"] == [0.0, 1.0, 0.0]  # the 0.07 examples lie in the 0.2 ball
    assert any("failed at larger eps" in str(w.message) for w in caught)
    assert curve["zero_gradient_fraction"] == 0.0
