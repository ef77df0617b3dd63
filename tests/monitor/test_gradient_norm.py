"""`gradkit.gradient_norm` (`gradkit.monitor._gradient_norm`): hand-computed values (the regularization's
gradient, sample weights, a head without a loss), numpy references, argument checks."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.errors import DisconnectedGradientError
from helpers.training import regularized_unit, two_heads, unit_kernel

from conftest import set_weights_from


def test_regularization_is_part_of_the_norm():
    model = regularized_unit()
    x, y = np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32)
    result = gradkit.gradient_norm(model, x, y, per_layer=True)
    assert result == {
        "grad_norm": pytest.approx(np.sqrt(5.0), rel=1e-6),
        "grad_norm/d": pytest.approx(np.sqrt(5.0), rel=1e-6),
    }
    assert gradkit.gradient_norm(model, x, y, include_regularization=False) == 0.0


def test_sample_weights_follow_keras_convention():
    model = unit_kernel()
    x, y = np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32)
    assert gradkit.gradient_norm(model, x, y) == pytest.approx(5.0, rel=1e-6)
    assert gradkit.gradient_norm(model, x, y, sample_weight=[1.0, 0.0]) == pytest.approx(1.0, rel=1e-6)
    zero = gradkit.gradient_norm(model, x, y, sample_weight=[0.0, 0.0])
    assert zero == 0.0 and not np.isnan(zero)


def test_returns_python_floats_and_matches_numpy_least_squares():
    rng = np.random.RandomState(0)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(1, name="lin"), keras.layers.Dense(1, name="out")]
    )
    set_weights_from(model, seed=1)
    model.compile(optimizer="sgd", loss="mse")
    x, y = rng.randn(6, 3).astype(np.float32), rng.randn(6, 1).astype(np.float32)
    w1, b1, w2, b2 = [w.astype(np.float64) for w in model.get_weights()]
    h = x @ w1 + b1
    r = 2.0 * (h @ w2 + b2 - y) / len(x)  # d mean((pred - y)^2) / d pred
    grads = [x.T @ (r @ w2.T), (r @ w2.T).sum(0), h.T @ r, r.sum(0)]
    layer = [np.sqrt(sum(np.sum(g**2) for g in grads[:2])), np.sqrt(sum(np.sum(g**2) for g in grads[2:]))]
    result = gradkit.gradient_norm(model, x, y, per_layer=True)
    assert list(result) == ["grad_norm", "grad_norm/lin", "grad_norm/out"]
    assert all(type(v) is float for v in result.values())
    np.testing.assert_allclose(list(result.values()), [np.hypot(*layer), *layer], rtol=1e-5)
    assert type(gradkit.gradient_norm(model, x, y)) is float


def test_training_flag_controls_dropout():
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.5), keras.layers.Dense(1)]
    )
    set_weights_from(model)
    model.compile(optimizer="sgd", loss="mse")
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    plain.set_weights(model.get_weights())
    plain.compile(optimizer="sgd", loss="mse")
    x, y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), np.ones((2, 1), np.float32)
    inference = gradkit.gradient_norm(model, x, y, training=False)
    assert inference == pytest.approx(gradkit.gradient_norm(plain, x, y), rel=1e-6)


def test_a_head_without_a_loss_has_zero_norm():
    model = two_heads()
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    result = gradkit.gradient_norm(model, x, {"head_a": np.ones((4, 2), np.float32)}, per_layer=True)
    assert result["grad_norm/head_b"] == 0.0
    assert result["grad_norm/head_a"] > 0.1
    assert result["grad_norm"] == pytest.approx(result["grad_norm/head_a"], rel=1e-7)


def test_argmax_loss_raises_instead_of_zero():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    set_weights_from(model)

    def argmax_loss(y_true, y_pred):
        return keras.ops.cast(keras.ops.argmax(y_pred, axis=-1), "float32") - keras.ops.cast(
            y_true[:, 0], "float32"
        )

    x, y = np.ones((2, 2), np.float32), np.zeros((2, 1), np.float32)
    with pytest.raises(DisconnectedGradientError, match="argmax"):
        gradkit.gradient_norm(model, x, y, loss=argmax_loss)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"per_layer": "yes"}, TypeError, "`per_layer` must be True or False"),
        ({"include_regularization": 1}, TypeError, "`include_regularization` must be True or False"),
        ({"training": None}, TypeError, "`training` must be True or False"),
        ({"sample_weight": [1.0, -1.0]}, ValueError, "sample_weight"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error, match):
    model = unit_kernel()
    x, y = np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32)
    with pytest.raises(error, match=match):
        gradkit.gradient_norm(model, x, y, **kwargs)


def test_non_model_is_rejected():
    with pytest.raises(TypeError, match="`model` must be a keras.Model"):
        gradkit.gradient_norm("model", np.ones((1, 1)), np.ones((1, 1)))
