"""Bad input raises a clear error naming the argument, before any work starts."""

import keras
import numpy as np
import pytest

import gradkit

from conftest import set_weights_from


@pytest.fixture
def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    set_weights_from(m)
    m.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


X = np.random.RandomState(0).rand(3, 4).astype(np.float32)


@pytest.mark.parametrize(
    "x, y, kwargs, error, match",
    [
        (X, [0, 1], {}, ValueError, "one row per sample"),
        (X[:, :3], [0, 1, 2], {}, ValueError, "feature shape"),
        (np.where(np.eye(3, 4) > 0, np.nan, X), [0, 1, 2], {}, ValueError, "NaN or inf"),
        (X.astype(np.int64), [0, 1, 2], {}, TypeError, "floating input"),
        (X, [0, 1, 3], {}, ValueError, r"outside \[0, 2\]"),
        (X, [0, 1, 1.5], {}, ValueError, r"integer class ids\. Received: 1 non-integer .*y\[2\]=.*1\.5"),
        (X, np.array(["0", "1", "2"]), {}, TypeError, "`y` must be a numeric array.*<U1"),
        (X, np.zeros((3, 2)), {}, ValueError, r"class ids of shape \(n,\).*y.shape=\(3, 2\)"),
        (X.tolist(), [0, 1, 2], {}, ValueError, r"Received: 3 \(a list or tuple is read as one array per"),
        (X, None, {}, ValueError, "`y` is required"),
        (X, [0, 1, 2], {"sample_weight": [1.0, -1.0, 1.0]}, ValueError, "sample_weight"),
        (X, [0, 1, 2], {"sample_weight": [1.0, 1.0]}, ValueError, "sample_weight"),
        (X, [0, 1, 2], {"batch_size": 0}, ValueError, "batch_size"),
        (np.zeros((0, 4), np.float32), [], {}, ValueError, "non-empty"),
        (X, [0, 1, 2], {"loss": 3}, TypeError, "`loss` must be"),
    ],
)
def test_input_gradient_errors(model, x, y, kwargs, error, match):
    with pytest.raises(error, match=match):
        gradkit.input_gradient(model, x, y, **kwargs)


def test_uncompiled_model_without_loss(model):
    bare = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="loss="):
        gradkit.InputGradient(bare)


def test_not_a_model():
    with pytest.raises(TypeError, match="keras.Model"):
        gradkit.InputGradient("model")


def test_float64_input_is_cast_and_traced_once(model):
    fn = gradkit.InputGradient(model)
    g32 = fn(X, [0, 1, 2])
    g64 = fn(X.astype(np.float64), [0, 1, 2])
    np.testing.assert_array_equal(g32, g64)
    assert fn.trace_count == 1


def test_multi_label_binary_targets_rejected_by_input_gradients():
    # weight gradients take multi-label targets as fit does (issue 19, tests/test_keras_spellings.py);
    # input gradients and attacks are for single-label classifiers and say so
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="sigmoid")])
    model.compile(loss="binary_crossentropy")
    with pytest.raises(ValueError, match="multi-label"):
        gradkit.input_gradient(model, X, np.zeros((3, 2)))


def test_non_default_reduction_rejected(model):
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    with pytest.raises(ValueError, match="reduction='sum'"):
        gradkit.weight_gradients(model, X, [0, 1, 2], loss=loss)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        return self.dense(x)


def test_subclassed_model_labels_are_checked_against_its_traced_class_count():
    model = Subclassed()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model(X)
    for fn in (gradkit.input_gradient, gradkit.weight_gradients):
        with pytest.raises(ValueError, match=r"outside \[0, 2\]. Received: min=0, max=7"):
            fn(model, X, [0, 7, 1])
    assert gradkit.input_gradient(model, X, [0, 2, 1]).shape == (3, 4)
