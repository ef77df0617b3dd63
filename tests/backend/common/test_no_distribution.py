"""The backends without keras.distribution support (`gradkit.backend.common.no_distribution`: TensorFlow,
PyTorch) refuse an active distribution clearly."""

import keras
import numpy as np
import pytest

import gradkit

from conftest import BACKEND


@pytest.mark.skipif(BACKEND == "jax", reason="JAX supports keras.distribution")
def test_other_backends_refuse_an_active_distribution(monkeypatch):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    monkeypatch.setattr(keras.distribution, "distribution", lambda: object())
    with pytest.raises(NotImplementedError, match="only on the JAX backend"):
        gradkit.input_gradient(model, np.zeros((2, 2), np.float32), [0, 1])
