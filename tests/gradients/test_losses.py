"""Issue 19: the same right gradient for every way Keras lets a user write a loss, an output activation, a
label or a precision. Expected values come from a hand computation or from one SGD(learning_rate=1) step
of `fit` itself (the update it applies is the gradient)."""

import functools
import warnings

import keras
import numpy as np
import pytest

from gradkit.attacks import fgsm
from gradkit.boosting import SAMME
from gradkit.gradients import AttackGradient, InputGradient, input_gradient, resolve_loss, weight_gradients
from gradkit.monitor import gradient_norm


def fit_update(model, x, y, sample_weight=None):
    """The update one SGD(1.0) step of `fit` applies on the whole batch: weights before - after."""
    before = [np.array(w) for w in model.get_weights()]
    model.fit(x, y, sample_weight=sample_weight, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    after = model.get_weights()
    model.set_weights(before)
    return [b - a for b, a in zip(before, after)]


def assert_equal_to_fit(grads, update, rtol=1e-5, atol=1e-7):
    assert len(grads) == len(update)
    for g, u in zip(grads, update):
        np.testing.assert_allclose(g, u, rtol=rtol, atol=atol)


# 1. A loss is recognised by what keras.losses.get resolves it to.
CCE, SCCE, BCE = keras.losses.CategoricalCrossentropy, keras.losses.SparseCategoricalCrossentropy, "bce"
SPELLINGS = [
    ("categorical_crossentropy", "categorical", False),
    ("CategoricalCrossentropy", "categorical", False),
    (CCE, "categorical", False),
    (CCE(), "categorical", False),
    (CCE(from_logits=True), "categorical", True),
    (CCE(reduction="mean"), "categorical", False),
    (keras.losses.categorical_crossentropy, "categorical", False),
    (functools.partial(keras.losses.categorical_crossentropy, from_logits=True), "categorical", True),
    ("sparse_categorical_crossentropy", "sparse", False),
    ("SparseCategoricalCrossentropy", "sparse", False),
    (SCCE(reduction="mean_with_sample_weight"), "sparse", False),
    (keras.losses.sparse_categorical_crossentropy, "sparse", False),
    ("binary_crossentropy", "binary", False),
    ("BinaryCrossentropy", "binary", False),
    (BCE, "binary", False),
    ("mse", "other", False),
    ("MeanSquaredError", "other", False),
]


@pytest.mark.parametrize("loss,kind,from_logits", SPELLINGS)
def test_every_spelling_resolves_to_its_kind(loss, kind, from_logits):
    spec = resolve_loss(loss)
    assert (spec.kind, spec.from_logits) == (kind, from_logits)


SOFTMAX_SPELLINGS = [s for s in SPELLINGS if s[1] in ("categorical", "sparse") and not s[2]]


def softmax_model(loss, seed=0):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    rng = np.random.RandomState(seed)
    model.set_weights([rng.randn(4, 3).astype("float32"), rng.randn(3).astype("float32")])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    return model


X4 = np.random.RandomState(1).randn(5, 4).astype("float32")
IDS = np.array([0, 2, 1, 1, 0])
SW = np.array([0.0, 2.0, 1.0, 0.5, 3.0], "float32")


@pytest.mark.parametrize("loss,kind,from_logits", SOFTMAX_SPELLINGS)
def test_every_spelling_gives_the_fit_update_with_sample_weights(loss, kind, from_logits):
    model = softmax_model(loss)
    y = IDS if kind == "sparse" else np.eye(3, dtype="float32")[IDS]
    grads = weight_gradients(model, X4, y, sample_weight=SW)
    assert_equal_to_fit(grads, fit_update(model, X4, y, SW))


@pytest.mark.parametrize("loss,kind,from_logits", SOFTMAX_SPELLINGS)
def test_every_spelling_gives_per_sample_input_gradients_from_the_logits(loss, kind, from_logits):
    model = softmax_model(loss)
    model.set_weights([w * 40 for w in model.get_weights()])  # saturated: float32 probabilities are one-hot
    kernel, bias = (w.astype(np.float64) for w in model.get_weights())
    z = X4 @ kernel + bias
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    expected = SW[:, None] * ((p - np.eye(3)[IDS]) @ kernel.T)  # zero-weight row: zero gradient
    got = input_gradient(model, X4, IDS, sample_weight=SW)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert np.all(got[0] == 0) and np.abs(got[1:]).max() > 1.0
    adv = fgsm(model, X4, None, eps=0.1)  # y=None: the predictions are the labels (a classifier)
    assert adv.shape == X4.shape


def test_boosting_hands_a_class_name_loss_its_labels():
    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="SparseCategoricalCrossentropy")
        return model

    x = np.random.RandomState(0).randn(60, 4).astype("float32")
    y = x[:, :3].argmax(axis=1)  # the sparse loss gets ids (one-hot rows would fail in fit)
    est = SAMME(build, n_estimators=1, fit_kwargs={"epochs": 20}, random_state=0, verbose=0).fit(x, y)
    assert len(est.estimators_) == 1 and est.score(x, y) > 0.6


# 2. Logits recovered wherever the graph shows the final softmax / sigmoid.
W = np.array([[20, 0, 0], [0, 1, 0]], np.float32)
X2 = np.array([[1, 0.5]], np.float32)


def hand_softmax_gradient():
    z = X2.astype(np.float64) @ W
    p = np.exp(z - z.max())
    p /= p.sum()
    return (p - np.eye(3)[[1]]) @ W.T.astype(np.float64)  # (p - onehot) W^T: about [20, -1]


def _softmax_head(kind, h, dense):
    if kind == "Softmax":
        return keras.layers.Softmax()(h)
    if kind == "Activation":
        return keras.layers.Activation("softmax")(h)
    if kind == "Activation(keras.activations.softmax)":
        return keras.layers.Activation(keras.activations.softmax)(h)
    if kind == "keras.ops.softmax":
        return keras.ops.softmax(h)
    if kind == "Lambda(keras.activations.softmax)":
        return keras.layers.Lambda(keras.activations.softmax)(h)
    inner = keras.Sequential([keras.Input((3,)), keras.layers.Softmax()])
    if kind == "nested Sequential":
        return inner(h)
    inp = keras.Input((3,))
    return keras.Model(inp, keras.layers.Activation("softmax")(inp))(h)


HEADS = ["Softmax", "Activation", "Activation(keras.activations.softmax)", "keras.ops.softmax",
         "Lambda(keras.activations.softmax)", "nested Sequential", "nested Functional"]  # fmt: skip


def head_model(kind):
    inp = keras.Input((2,))
    if kind == "Dense(activation='softmax')":
        dense = keras.layers.Dense(3, activation="softmax", use_bias=False)
        out = dense(inp)
    elif kind == "nested Dense(activation='softmax')":
        dense = keras.layers.Dense(3, activation="softmax", use_bias=False)
        out = keras.Sequential([keras.Input((2,)), dense])(inp)
    else:
        dense = keras.layers.Dense(3, use_bias=False)
        out = _softmax_head(kind, dense(inp), dense)
    model = keras.Model(inp, out)
    dense.set_weights([W])
    model.compile(loss="sparse_categorical_crossentropy")
    return model


@pytest.mark.parametrize(
    "kind", HEADS + ["Dense(activation='softmax')", "nested Dense(activation='softmax')"]
)
def test_softmax_written_any_way_gives_the_logit_gradient(kind):
    model = head_model(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "through the probabilities" warning
        grad = InputGradient(model)
        got = grad(X2, [1])
        adv = fgsm(model, X2, [1], eps=0.1)
    np.testing.assert_allclose(got, hand_softmax_gradient(), rtol=1e-5)
    assert grad.from_probabilities == [False]
    np.testing.assert_allclose(adv - X2, [[0.1, -0.1]], rtol=1e-5)  # both coordinates move


def test_sigmoid_activation_layer_gives_the_logit_gradient():
    inp = keras.Input((2,))
    dense = keras.layers.Dense(1, use_bias=False)
    model = keras.Model(inp, keras.layers.Activation("sigmoid")(dense(inp)))
    dense.set_weights([np.array([[30.0], [-2.0]], np.float32)])
    model.compile(loss="BinaryCrossentropy")
    x = np.array([[1.0, 0.0]], np.float32)  # logit 30: float32 sigmoid is exactly 1
    p = 1 / (1 + np.exp(-30.0))
    np.testing.assert_allclose(input_gradient(model, x, [0]), [[30 * p, -2 * p]], rtol=1e-6)


def test_opaque_softmax_warns_once_and_flags_probabilities():
    inp = keras.Input((2,))
    dense = keras.layers.Dense(3, use_bias=False)
    model = keras.Model(inp, keras.layers.Lambda(lambda t: keras.ops.softmax(t))(dense(inp)))
    dense.set_weights([W])
    model.compile(loss="sparse_categorical_crossentropy")
    with pytest.warns(UserWarning, match="through the probabilities"):
        grad = InputGradient(model)
    assert grad.from_probabilities == [True]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        InputGradient(model, batch_size=1)  # once per model
    grad(X2, [1])  # runs (its values may vanish: that is what the warning says)
    assert AttackGradient(model).from_probabilities == [True]  # the evaluation's "probabilities" flag
    adv = fgsm(model, X2, [1], eps=0.1)  # log-probabilities stand in for the logits: both coordinates move
    np.testing.assert_allclose(adv - X2, [[0.1, -0.1]], rtol=1e-5)


# 3. Mixed precision: the loss is scaled as fit's LossScaleOptimizer scales it, then unscaled.
Y_SMALL = np.array([[2.0**-10 - 2.0**-27]], np.float32)  # residual 2**-27: d loss / d out = 2**-26


def one_unit(kernel):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.set_weights([np.array([[kernel]], np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    return model


def test_float16_weight_gradient_of_1e6_is_not_zero_and_equals_fit():
    # out = 2**-16 * 64 = 2**-10 exactly; d loss / d out = 2**-26 rounds to 0 in float16 unless scaled;
    # d loss / d w = 64 * 2**-26 = 2**-20 (about 1e-6).
    x = np.array([[64.0]], np.float32)
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = one_unit(2.0**-16)
        assert model.layers[0].compute_dtype == "float16"
        grads = weight_gradients(model, x, Y_SMALL)
        norm = gradient_norm(model, x, Y_SMALL)
        update = fit_update(model, x, Y_SMALL)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    np.testing.assert_allclose(grads[0], [[2.0**-20]], rtol=1e-3)
    np.testing.assert_allclose(update[0], [[2.0**-20]], rtol=1e-3)
    assert norm == pytest.approx(2.0**-20, rel=1e-3)


def test_float16_input_gradient_of_1e6_is_not_zero():
    x = np.array([[2.0**-16]], np.float32)  # d loss / d x = 64 * 2**-26 = 2**-20
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = one_unit(64.0)
        got = input_gradient(model, x, Y_SMALL)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    np.testing.assert_allclose(got, [[2.0**-20]], rtol=1e-3)


def mlp(seed):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(3, activation="softmax")])  # fmt: skip
    rng = np.random.RandomState(seed)
    model.set_weights([rng.randn(*w.shape).astype("float32") for w in model.get_weights()])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="sparse_categorical_crossentropy")
    return model


def test_float16_gradients_match_float32_within_float16_precision():
    reference = mlp(3)
    expected_w, expected_x = weight_gradients(reference, X4, IDS), input_gradient(reference, X4, IDS)
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = mlp(3)
        got_w, got_x = weight_gradients(model, X4, IDS), input_gradient(model, X4, IDS)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    for g, e in zip(got_w, expected_w):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-2 * np.abs(e).max())
    np.testing.assert_allclose(got_x, expected_x, rtol=0, atol=1e-2 * np.abs(expected_x).max())


# 4. Binary cross-entropy on several units: what fit takes, the update fit applies; attacks refuse.
X_ML = np.random.RandomState(2).randn(4, 3).astype("float32")
MULTI = np.array([[1, 0], [1, 1], [0, 0], [0, 1]], np.float32)


@pytest.mark.parametrize(
    "activation,y", [("sigmoid", MULTI), ("softmax", np.eye(2, dtype="float32")[[0, 1, 1, 0]])]
)
def test_binary_crossentropy_on_two_units_gives_the_fit_update(activation, y):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation=activation)])
    rng = np.random.RandomState(4)
    model.set_weights([rng.randn(3, 2).astype("float32"), rng.randn(2).astype("float32")])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="binary_crossentropy")
    update = fit_update(model, X_ML, y)
    assert_equal_to_fit(weight_gradients(model, X_ML, y), update)
    expected_norm = np.sqrt(sum(np.sum(u.astype(np.float64) ** 2) for u in update))
    assert gradient_norm(model, X_ML, y) == pytest.approx(expected_norm, rel=1e-5)
    with pytest.raises(ValueError, match="single-label classifiers"):
        input_gradient(model, X_ML, y)
    with pytest.raises(ValueError, match="single-label classifiers"):
        fgsm(model, X_ML, y, eps=0.1)
    with pytest.raises(ValueError, match="single-label classifiers"):
        fgsm(model, X_ML, None, eps=0.1)
