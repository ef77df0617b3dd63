"""Bounds against a peer: decomon 0.2.1 (Keras 3, Airbus) gives the same IBP, CROWN-IBP and CROWN bounds as
`gradkit.output_bounds` on an MLP and on a small CNN.

decomon 0.2.1 runs on PyTorch only under Keras 3.15 (its layers fail to trace on TensorFlow and JAX), wants a
flat input, and its Conv2D cannot be built (Keras' `kernel` became a read-only property). The CNN is therefore
handed to decomon as its exact dense twin: each convolution unrolled into the matrix of its responses to the
unit inputs, the same function of the same inputs, so both tools bound one network.
"""

import keras
import numpy as np
import pytest
from keras import layers

from gradkit.certificates import output_bounds

from conftest import BACKEND

if BACKEND != "torch":
    pytest.skip("decomon 0.2.1 runs on PyTorch under Keras 3.15", allow_module_level=True)


@pytest.fixture(scope="module")
def clone():
    if not hasattr(np, "float_"):  # decomon 0.2.1 names np.float_ (gone in NumPy 2) in annotations only
        np.float_ = np.float64
        try:
            from decomon.models import clone
        finally:
            del np.float_
    else:
        from decomon.models import clone
    return clone


PAIRS = [("forward-ibp", "ibp"), ("crown-forward-ibp", "crown-ibp"), ("crown", "crown")]


def _decomon_bounds(clone, model, x, eps):
    box = np.stack([np.clip(x - eps, 0, 1), np.clip(x + eps, 0, 1)], axis=1)
    out = {}
    for peer_method, method in PAIRS:
        upper, lower = clone(model, method=peer_method, final_ibp=True, final_affine=False).predict(
            box, verbose=0
        )
        out[method] = np.asarray(lower), np.asarray(upper)
    return out


def _mlp():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((64,)),
            layers.Dense(32, activation="relu"),
            layers.Dense(16, activation="relu"),
            layers.Dense(10),
        ]
    )


def _cnn_and_dense_twin():
    keras.utils.set_random_seed(1)
    cnn = keras.Sequential(
        [
            keras.Input((64,)),
            layers.Reshape((8, 8, 1)),
            layers.Conv2D(4, 3, activation="relu"),
            layers.Conv2D(4, 3, strides=2, activation="relu"),
            layers.Flatten(),
            layers.Dense(10),
        ]
    )
    twin, shape = [keras.Input((64,))], (8, 8, 1)
    h = twin[0]
    for conv in cnn.layers[1:3]:
        d = int(np.prod(shape))
        w, b = (np.asarray(keras.ops.convert_to_numpy(v)) for v in conv.weights)
        linear = keras.Sequential(
            [keras.Input(shape), layers.Conv2D(w.shape[-1], w.shape[0], strides=conv.strides)]
        )
        linear.layers[0].set_weights([w, np.zeros_like(b)])
        basis = np.eye(d, dtype=np.float32).reshape((d,) + shape)
        matrix = np.asarray(linear.predict(basis, verbose=0))
        shape = matrix.shape[1:]
        dense = layers.Dense(int(np.prod(shape)), activation="relu")
        h = dense(h)
        dense.set_weights([matrix.reshape(d, -1), np.broadcast_to(b, shape).reshape(-1)])
    head = layers.Dense(10)
    out = head(h)
    head.set_weights([np.asarray(keras.ops.convert_to_numpy(v)) for v in cnn.layers[-1].weights])
    return cnn, keras.Model(twin[0], out)


def _points(n=6, d=64, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (n, d)).astype(np.float32)


@pytest.mark.parametrize("method", [m for _, m in PAIRS])
def test_mlp_bounds_equal_decomons(clone, method):
    model, x, eps = _mlp(), _points(), 0.02
    low, high = _decomon_bounds(clone, model, x, eps)[method]
    g_low, g_high = output_bounds(model, x, eps, norm="linf", method=method, clip_values=(0, 1))
    np.testing.assert_allclose(g_low, low, atol=1e-5)
    np.testing.assert_allclose(g_high, high, atol=1e-5)
    assert np.all(high - low > 0.05)  # not a degenerate ball: the bounds carry the relaxations


def test_cnn_bounds_equal_decomons_on_its_dense_twin(clone):
    cnn, twin = _cnn_and_dense_twin()
    x, eps = _points(seed=1), 0.03
    np.testing.assert_allclose(cnn.predict(x, verbose=0), twin.predict(x, verbose=0), atol=1e-5)
    peer = _decomon_bounds(clone, twin, x, eps)
    widths = []
    for method in ("ibp", "crown-ibp", "crown"):
        g_low, g_high = output_bounds(cnn, x, eps, norm="linf", method=method, clip_values=(0, 1))
        np.testing.assert_allclose(g_low, peer[method][0], atol=1e-5)
        np.testing.assert_allclose(g_high, peer[method][1], atol=1e-5)
        widths.append(float(np.mean(g_high - g_low)))
    assert widths[0] > widths[2] > 0  # CROWN is tighter than IBP here, as it must be
