"""Two-class data on the diagonal and one-unit binary heads whose worst case is known by hand: the
decision rule, the evaluation and the overfitting check are all tested on them."""

import keras
import numpy as np


def diagonal_data():
    """x uniform in [0.05, 0.95]^2, label 1 iff x0 > x1, 120 points of margin |x0 - x1| / 2 > 0.02."""
    x = np.random.RandomState(0).uniform(0.05, 0.95, (2000, 2)).astype("float32")
    x = x[np.abs(x[:, 0] - x[:, 1]) / 2 > 0.02][:120]
    return x, (x[:, 0] > x[:, 1]).astype("int32")


def hand_accuracy(x, eps):
    """A linear model on the diagonal: the exact worst case under Linf eps (no clipping)."""
    return float(np.mean(np.abs(x[:, 0] - x[:, 1]) / 2 > eps))


def binary_model(head, compiled=True):
    """Input(2) -> Dense(1) with kernel [[6], [-6]]: `head` "sigmoid" (probability), "logit" or
    "softmax" (the equivalent two-unit control)."""
    inp = keras.Input((2,))
    if head == "softmax":
        dense = keras.layers.Dense(2, activation="softmax")
        kernel, loss = np.array([[-3, 3], [3, -3]], "float32"), "sparse_categorical_crossentropy"
    else:
        dense = keras.layers.Dense(1, activation="sigmoid" if head == "sigmoid" else None)
        kernel = np.array([[6], [-6]], "float32")
        loss = keras.losses.BinaryCrossentropy(from_logits=head == "logit")
    model = keras.Model(inp, dense(inp))
    dense.set_weights([kernel, np.zeros(kernel.shape[1], "float32")])
    if compiled:
        model.compile(keras.optimizers.SGD(learning_rate=0.0), loss)
    return model
