"""A compiled cross-entropy's `label_smoothing` and `ignore_class`: applied where gradkit differentiates
the compiled loss (as Keras computes it), refused by the attacks (whose "ce" is the plain cross-entropy)."""

import keras
import numpy as np
import pytest

import gradkit

from conftest import central_difference, set_weights_from

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
