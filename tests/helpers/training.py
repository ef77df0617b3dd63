"""The small models, data and `fit` that the monitor's tests (and the tests of what they log) share: an
MLP on eight rows of four features, and one-weight models whose gradients are known by hand."""

import keras
import numpy as np

from conftest import set_weights_from

X = np.random.RandomState(0).randn(8, 4).astype(np.float32)
Y = np.arange(8) % 3
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mlp(optimizer=None, regularizer=None):
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(6, activation="tanh", kernel_regularizer=regularizer, name="hidden"),
            keras.layers.Dropout(0.0),  # no trainable weights: no per-layer entry
            keras.layers.Dense(3, name="logits"),
        ]
    )
    set_weights_from(model)
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss=LOSS)
    return model


def fit(model, x, y, callback=None, **kwargs):
    kwargs = {"batch_size": len(x), "epochs": 1, "shuffle": False, "verbose": 0, **kwargs}
    return model.fit(x, y, callbacks=[callback] if callback else None, **kwargs).history


def regularized_unit():
    """Dense(1, no bias, L2(0.5)) with kernel [[1], [2]], mse, SGD(1): on zero inputs and targets the
    gradient is the regularization's alone, the kernel itself (norm sqrt(5))."""
    model = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(1, use_bias=False, kernel_regularizer=keras.regularizers.L2(0.5), name="d"),
        ]
    )
    model.set_weights([np.array([[1.0], [2.0]], np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss="mse")
    return model


def unit_kernel():
    """Dense(1, no bias) with kernel 1, mse, SGD(0): one sample x with target 0 has gradient 2 x^2."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, name="d")])
    model.set_weights([np.ones((1, 1), np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse")
    return model


def two_heads():
    """Heads head_a and head_b on Input(2); the loss uses head_a only: head_b's weights get no gradient."""
    inputs = keras.Input((2,))
    head_a = keras.layers.Dense(2, name="head_a")(inputs)
    head_b = keras.layers.Dense(2, name="head_b")(inputs)
    model = set_weights_from(keras.Model(inputs, [head_a, head_b]))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss={"head_a": "mse", "head_b": None})
    return model
