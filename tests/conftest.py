"""Shared fixtures. The backend is chosen by KERAS_BACKEND before keras is imported (see Makefile)."""

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


def set_weights_from(model, seed=0, scale=0.5):
    """Deterministic weights from numpy, identical on every backend."""
    rng = np.random.RandomState(seed)
    model.set_weights([(rng.randn(*w.shape) * scale).astype(w.dtype) for w in model.get_weights()])
    return model


def central_difference(f, x, h=1e-3):
    """Central finite difference of the scalar function f at x (float64)."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (f(up) - f(down)) / (2 * h)
    return grad
