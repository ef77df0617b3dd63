"""Logits recovered wherever the graph shows the final softmax or sigmoid
(`gradkit.gradients._logits`): the gradient through the logits for every way Keras lets a user write
the activation, and a warning where the softmax is opaque."""

import warnings

import keras
import numpy as np
import pytest

from gradkit.attacks import fgsm
from gradkit.gradients import AttackGradient, InputGradient, input_gradient

# The softmax of X2 @ W saturates (class 0 holds all but 5e-9 of the probability); the tests' label is 1.
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
