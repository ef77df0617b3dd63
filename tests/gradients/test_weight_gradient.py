"""`weight_gradients` (`gradkit.gradients._weight_gradient`): the gradient `fit` applies (the regularization's
gradient, Keras' sample-weight convention, a head without a loss) and finite differences."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.gradients._cache import cached_values

from conftest import central_difference, set_weights_from


def regularized_unit():
    """Dense(1, no bias, L2(0.5)) with kernel [[1], [2]], mse, SGD(1)."""
    model = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(1, use_bias=False, kernel_regularizer=keras.regularizers.L2(0.5)),
        ]
    )
    model.set_weights([np.array([[1.0], [2.0]], np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss="mse")
    return model


def test_regularization_included_and_sgd_step():
    model = regularized_unit()
    x, y = np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32)
    (grad,) = gradkit.weight_gradients(model, x, y)
    np.testing.assert_allclose(grad, [[1.0], [2.0]], rtol=1e-6)
    np.testing.assert_allclose(np.sqrt((grad**2).sum()), 2.23607, rtol=1e-5)
    (no_reg,) = gradkit.weight_gradients(model, x, y, include_regularization=False)
    np.testing.assert_array_equal(no_reg, np.zeros((2, 1)))
    before = model.get_weights()[0]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(before - model.get_weights()[0], grad, rtol=1e-6)


def unit_kernel():
    """Dense(1, no bias) with kernel 1, mse."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.set_weights([np.ones((1, 1), np.float32)])
    model.compile(loss="mse")
    return model


@pytest.mark.parametrize(
    "weights, expected", [(None, 5.0), ([1.0, 0.0], 1.0), ([0.0, 0.0], 0.0), ([2.0, 2.0], 10.0)]
)
def test_keras_sample_weight_convention(weights, expected):
    model = unit_kernel()
    x, y = np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32)
    (grad,) = gradkit.weight_gradients(model, x, y, sample_weight=weights)
    assert np.isfinite(grad).all()
    np.testing.assert_allclose(grad, [[expected]], rtol=1e-6)


def test_matches_finite_difference_of_keras_loss():
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(2, activation="softmax")(keras.layers.Dense(4, "tanh")(inp)))
    set_weights_from(model, seed=5)
    model.compile(loss="sparse_categorical_crossentropy")
    rng = np.random.RandomState(1)
    x, y = rng.rand(5, 3).astype("float32"), rng.randint(0, 2, 5)
    grads = gradkit.weight_gradients(model, x, y)
    weights = [np.asarray(w, np.float64) for w in model.get_weights()]

    def loss_at(kernel):
        h = np.tanh(x @ kernel + weights[1])
        z = h @ weights[2] + weights[3]
        z = z - z.max(1, keepdims=True)
        return -(z[np.arange(5), y] - np.log(np.exp(z).sum(1))).mean()

    np.testing.assert_allclose(grads[0], central_difference(loss_at, weights[0]), rtol=1e-3, atol=1e-5)
    assert [g.shape for g in grads] == [tuple(w.shape) for w in model.trainable_weights]


def test_a_head_without_a_loss_gets_zero_gradients():
    inp = keras.Input((2,))
    head_a = keras.layers.Dense(2, name="head_a")(inp)
    head_b = keras.layers.Dense(2, name="head_b")(inp)
    model = keras.Model(inp, [head_a, head_b])
    set_weights_from(model, seed=6)
    model.compile(loss={"head_a": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    x, y = np.array([[0.5, -1.0], [1.0, 2.0]], np.float32), np.array([0, 1])
    grads = gradkit.weight_gradients(model, x, {"head_a": y})
    names = [w.path for w in model.trainable_weights]
    assert len(grads) == 4
    for name, grad in zip(names, grads):
        if name.startswith("head_b"):
            np.testing.assert_array_equal(grad, np.zeros_like(grad))
        else:
            assert np.any(grad != 0)
    by_output = gradkit.weight_gradients(
        model, x, y, output="head_a", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    for a, b in zip(grads, by_output):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_argmax_loss_raises_instead_of_zero():
    model = unit_kernel()

    def argmax_loss(y_true, y_pred):
        return keras.ops.cast(keras.ops.round(y_pred), "float32")[:, 0] * 0 + keras.ops.cast(
            keras.ops.argmax(keras.ops.concatenate([y_pred, -y_pred], axis=1), axis=-1), "float32"
        )

    with pytest.raises(gradkit.DisconnectedGradientError, match="argmax"):
        gradkit.weight_gradients(model, np.ones((2, 1), np.float32), np.zeros((2, 1)), loss=argmax_loss)


def test_uncompiled_model_needs_loss():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="not compiled with a loss"):
        gradkit.weight_gradients(model, np.ones((2, 1), np.float32), np.zeros((2, 1)))
    grads = gradkit.weight_gradients(model, np.ones((2, 1), np.float32), np.zeros((2, 1)), loss="mse")
    assert len(grads) == 2


def test_compiled_once_and_sees_new_weights():
    model = unit_kernel()
    x, y = np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32)
    gradkit.weight_gradients(model, x, y)
    model.set_weights([np.full((1, 1), 2.0, np.float32)])
    (grad,) = gradkit.weight_gradients(model, x, y)
    np.testing.assert_allclose(grad, [[10.0]], rtol=1e-6)
    fn = cached_values(model, "weights")[0]
    assert fn.trace_count == 1


@pytest.mark.parametrize(
    "loss, loss_weights",
    [
        ({"cls": "sparse_categorical_crossentropy", "reg": "mse"}, {"cls": 1.0, "reg": 0.3}),
        (["sparse_categorical_crossentropy", "mse"], [1.0, 0.0]),
        ("mse", 0.5),  # one loss and one weight for both heads (cls then takes one-hot mse targets)
    ],
)
def test_compiled_loss_weights_weigh_the_heads_as_the_sgd_step(loss, loss_weights):
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(4, activation="tanh")(inputs)
    heads = [
        keras.layers.Dense(3, activation="softmax", name="cls")(hidden),
        keras.layers.Dense(1, name="reg")(hidden),
    ]
    model = set_weights_from(keras.Model(inputs, heads))
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss, loss_weights=loss_weights)
    rng = np.random.RandomState(0)
    x, y = rng.randn(12, 5).astype(np.float32), [rng.randint(0, 3, 12), 10 * rng.randn(12, 1)]
    if loss == "mse":
        y[0] = np.eye(3, dtype=np.float32)[y[0]]
    grads = gradkit.weight_gradients(model, x, y)
    norm = gradkit.gradient_norm(model, x, y)
    before = model.get_weights()
    model.fit(x, y, batch_size=12, epochs=1, verbose=0, shuffle=False)
    for g, b, a in zip(grads, before, model.get_weights()):
        np.testing.assert_allclose(g, b - a, rtol=2e-4, atol=1e-6)
    assert norm == pytest.approx(np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads)))


def _square_mlp():
    """Three Dense(4) layers on 4 inputs: every layer's variables have the same shapes, so a function
    traced for one trainable split takes another split's arguments without a shape error."""
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(4, activation=a) for a in ("tanh", "tanh", "softmax")]
    model = keras.Sequential([keras.Input((4,)), *layers])
    model.compile("sgd", "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    return model, rng.normal(size=(16, 4)).astype("float32"), rng.integers(0, 4, 16)


def test_freezing_a_layer_after_a_call_gives_the_remaining_gradients():
    """A layer frozen (or unfrozen) after gradkit compiled its gradient: the gradient w.r.t. each still
    trainable weight is unchanged, and the input gradient too (it was a crash inside the PyTorch trace
    and silently mixed layers up where the shapes agree)."""
    model, x, y = _square_mlp()
    full = gradkit.weight_gradients(model, x, y)
    x_grad = gradkit.input_gradient(model, x, y)
    for frozen, kept in ((0, [2, 3, 4, 5]), (1, [0, 1, 4, 5]), (None, [0, 1, 2, 3, 4, 5])):
        for i, layer in enumerate(model.layers):
            layer.trainable = i != frozen
        got = gradkit.weight_gradients(model, x, y)
        assert len(got) == len(kept)
        for g, k in zip(got, kept):
            np.testing.assert_allclose(g, full[k], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gradkit.input_gradient(model, x, y), x_grad, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gradkit.InputGradient(model)(x, y), x_grad, rtol=1e-5, atol=1e-7)
        per_layer = gradkit.gradient_norm(model, x, y, per_layer=True)
        assert per_layer["grad_norm"] == pytest.approx(np.sqrt(sum(np.sum(g**2) for g in got)), rel=1e-5)


def test_compiling_again_with_another_loss_is_seen():
    """`model.compile(loss=...)` again after gradkit built its functions: the new loss is used (the
    cached functions used to keep the first loss)."""
    model, x, y = _square_mlp()
    weights, x_grad = gradkit.weight_gradients(model, x, y), gradkit.input_gradient(model, x, y)
    norm = gradkit.gradient_norm(model, x, y)
    model.compile("sgd", lambda t, p: 2.0 * keras.losses.sparse_categorical_crossentropy(t, p))
    for g, g0 in zip(gradkit.weight_gradients(model, x, y), weights):
        np.testing.assert_allclose(g, 2 * g0, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gradkit.input_gradient(model, x, y), 2 * x_grad, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gradkit.InputGradient(model)(x, y), 2 * x_grad, rtol=1e-5, atol=1e-7)
    assert gradkit.gradient_norm(model, x, y) == pytest.approx(2 * norm, rel=1e-5)
    model.compile("sgd", lambda t, p: 0.0 * keras.losses.sparse_categorical_crossentropy(t, p))
    assert gradkit.gradient_norm(model, x, y) == 0.0
