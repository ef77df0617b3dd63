"""Rows in batches (`gradkit.gradients._batches`) with BatchNormalization in training mode: the batch
statistics are those of exactly the rows given.

Gradients with training=True are never computed on a padded batch (padding rows would enter the batch
statistics and change every row's gradient), and no model variable moves.
"""

import keras
import numpy as np
import pytest

import gradkit

from conftest import central_difference, set_weights_from

RNG = np.random.RandomState(1)
X = RNG.randn(5, 3).astype("float32")
Y = np.array([0, 1, 0, 1, 1])


def bn_model():
    """Input(3) -> Dense(4) -> BatchNormalization -> tanh -> Dense(2) logits."""
    inp = keras.Input((3,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(4)(inp))
    out = keras.layers.Dense(2)(keras.layers.Activation("tanh")(hidden))
    model = set_weights_from(keras.Model(inp, out), seed=7)
    bn = model.layers[2]  # moving statistics away from the batch's, so the two modes differ
    bn.moving_mean.assign(np.full(4, 0.3, np.float32))
    bn.moving_variance.assign(np.full(4, 2.0, np.float32))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def summed_ce(model, training):
    """`x -> sum_i CE(y_i, model(x, training=training)_i)` in float64, x of the 5 rows."""

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss(x):  # a stateless call: the moving statistics are not updated by the reference either
        z, _ = model.stateless_call(trainable, non_trainable, x.astype(np.float32), training=training)
        z = np.asarray(keras.ops.convert_to_numpy(z), np.float64)
        z = z - z.max(1, keepdims=True)
        return float(-(z[np.arange(len(Y)), Y] - np.log(np.exp(z).sum(1))).sum())

    return loss


def statistics(model):
    return [np.array(keras.ops.convert_to_numpy(v)) for v in model.non_trainable_variables]


@pytest.mark.parametrize("training", [True, False])
def test_input_gradient_equals_finite_differences_of_these_rows(training):
    model = bn_model()
    before = statistics(model)
    expected = central_difference(summed_ce(model, training), X, h=1e-3)
    for batch_size in (None, 5):
        grad = gradkit.input_gradient(model, X, Y, training=training, batch_size=batch_size)
        np.testing.assert_allclose(grad, expected, rtol=2e-3, atol=2e-4)
    for a, b in zip(before, statistics(model)):
        np.testing.assert_array_equal(a, b)


def test_training_batches_are_their_own_rows():
    """With batch_size=3 the statistics are those of rows 0-2, then of rows 3-4 (not padded to 3)."""
    model = bn_model()
    grad = gradkit.input_gradient(model, X, Y, training=True, batch_size=3)
    for rows in (slice(0, 3), slice(3, 5)):
        alone = gradkit.input_gradient(model, X[rows], Y[rows], training=True)
        np.testing.assert_allclose(grad[rows], alone, rtol=1e-5, atol=1e-6)


def test_weight_gradients_and_norm_in_training_mode_use_these_rows():
    model = bn_model()
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer=keras.optimizers.SGD(1.0)
    )
    before = statistics(model)
    grads = gradkit.weight_gradients(model, X, Y)  # training=True by default, as fit
    norm = gradkit.gradient_norm(model, X, Y)
    for a, b in zip(before, statistics(model)):
        np.testing.assert_array_equal(a, b)
    weights = [np.array(w) for w in model.get_weights()]
    trainable = {id(v) for v in model.trainable_variables}
    model.train_on_batch(X, Y)
    update = [b - a for v, b, a in zip(model.weights, weights, model.get_weights()) if id(v) in trainable]
    for g, u in zip(grads, update):
        np.testing.assert_allclose(g, u, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        norm, np.sqrt(sum(np.sum(np.square(u, dtype=np.float64)) for u in update)), rtol=1e-5
    )
