"""Which loss gradkit differentiates (`gradkit.gradients._losses`): the same right gradient for every
way Keras lets a user write a loss, a label or a precision; a compiled cross-entropy's `label_smoothing`
and `ignore_class`. Expected values come from a hand computation or from one SGD(learning_rate=1) step of
`fit` itself (the update it applies is the gradient)."""

import functools

import keras
import numpy as np
import pytest

import gradkit
from gradkit.attacks import fgsm
from gradkit.gradients import input_gradient, resolve_loss, weight_gradients
from gradkit.monitor import gradient_norm

from conftest import central_difference, set_weights_from


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


# 2. Mixed precision: the loss is scaled as fit's LossScaleOptimizer scales it, then unscaled.
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


# 3. Binary cross-entropy on several units: what fit takes, the update fit applies; attacks refuse.
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


# 4. A compiled cross-entropy's `label_smoothing` and `ignore_class`: applied where gradkit differentiates
# the compiled loss (as Keras computes it), refused by the attacks (whose "ce" is the plain cross-entropy).
RNG = np.random.RandomState(2)
X = RNG.rand(6, 3).astype("float32")
Y = np.array([0, 1, 2, 1, 0, 2])


def model_with(loss, activation=None):
    """Input(3) -> Dense(5, tanh) -> Dense(3, activation), compiled with `loss` and SGD(1)."""
    inp = keras.Input((3,))
    hidden = keras.layers.Dense(5, activation="tanh")(inp)
    model = set_weights_from(keras.Model(inp, keras.layers.Dense(3, activation=activation)(hidden)), seed=1)
    model.compile(loss=loss, optimizer=keras.optimizers.SGD(learning_rate=1.0))
    return model


def summed_loss(model, smoothing=0.0, ignore=None):
    """`x -> sum_i CE_i` by hand in float64: labels smoothed as Keras smooths them (y (1 - s) + s / C),
    rows of the ignored class left out."""
    w = [np.asarray(v, np.float64) for v in model.get_weights()]
    target = np.eye(3)[np.where(Y == ignore, 0, Y)] * (1 - smoothing) + smoothing / 3
    kept = Y != ignore

    def value(x):
        z = np.tanh(x @ w[0] + w[1]) @ w[2] + w[3]
        z = z - z.max(1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
        return float(-((target * log_p).sum(1) * kept).sum())

    return value


def keras_value(model, loss, y):
    """The compiled loss's own value on X, summed over the rows (Keras averages)."""
    return float(keras.ops.convert_to_numpy(loss(y, model(X)))) * len(X)


@pytest.mark.parametrize("activation", [None, "softmax"])
def test_label_smoothing_is_applied_to_input_gradients(activation):
    loss = keras.losses.CategoricalCrossentropy(from_logits=activation is None, label_smoothing=0.3)
    model = model_with(loss, activation)
    onehot = np.eye(3, dtype="float32")[Y]
    by_hand = summed_loss(model, smoothing=0.3)
    np.testing.assert_allclose(keras_value(model, loss, onehot), by_hand(X.astype(np.float64)), rtol=1e-5)
    grad = gradkit.input_gradient(model, X, Y)
    np.testing.assert_allclose(grad, central_difference(by_hand, X, h=1e-4), rtol=1e-4, atol=1e-6)
    plain_loss = keras.losses.CategoricalCrossentropy(from_logits=activation is None)
    plain = gradkit.input_gradient(model, X, Y, loss=plain_loss)
    assert np.abs(plain - grad).max() > 1e-3  # the smoothing changes the gradient


def test_ignore_class_in_input_and_weight_gradients():
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=1)
    model = model_with(loss)
    grad = gradkit.input_gradient(model, X, Y)
    np.testing.assert_array_equal(grad[Y == 1], 0.0)
    plain = gradkit.input_gradient(
        model, X, Y, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    np.testing.assert_allclose(grad[Y != 1], plain[Y != 1], rtol=1e-6)
    by_hand = summed_loss(model, ignore=1)
    kept = np.sum(Y != 1)  # Keras averages over the kept rows
    np.testing.assert_allclose(
        keras_value(model, loss, Y) * kept / len(Y), by_hand(X.astype(np.float64)), rtol=1e-5
    )
    np.testing.assert_allclose(grad, central_difference(by_hand, X, h=1e-4), rtol=1e-4, atol=1e-6)
    outside = np.where(Y == 1, -1, Y)  # an ignored class outside [0, C - 1]
    other = model_with(keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1))
    np.testing.assert_array_equal(gradkit.input_gradient(other, X, outside)[Y == 1], 0.0)
    grads = gradkit.weight_gradients(model, X, Y)
    before = [np.array(w) for w in model.get_weights()]
    model.train_on_batch(X, Y)
    for g, b, a in zip(grads, before, model.get_weights()):
        np.testing.assert_allclose(g, b - a, rtol=1e-5, atol=1e-6)


def test_label_smoothing_in_weight_gradients_equals_fit():
    model = model_with(keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3))
    onehot = np.eye(3, dtype="float32")[Y]
    grads = gradkit.weight_gradients(model, X, onehot)
    before = [np.array(w) for w in model.get_weights()]
    model.train_on_batch(X, onehot)
    for g, b, a in zip(grads, before, model.get_weights()):
        np.testing.assert_allclose(g, b - a, rtol=1e-5, atol=1e-6)


def test_attacks_refuse_what_their_cross_entropy_would_drop():
    model = model_with(keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3))
    with pytest.raises(ValueError, match=r"`loss`.*label_smoothing=0\.3.*pass loss='ce'"):
        gradkit.fgsm(model, X, Y, eps=0.1)
    adv = gradkit.fgsm(model, X, Y, eps=0.1, loss="ce")
    plain = gradkit.input_gradient(model, X, Y, loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    np.testing.assert_allclose(adv, X + 0.1 * np.sign(plain), atol=1e-6)
    ignoring = model_with(keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=1))
    with pytest.raises(ValueError, match="ignore_class=1"):
        gradkit.pgd(ignoring, X, Y, eps=0.1, eps_step=0.05, steps=2)
