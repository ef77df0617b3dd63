"""Square Linf's redraw rule (`gradkit.attacks.square.window_sums`): the sums of `|end - best|` over each
window, over a gathered patch once the window fits in it, against the previous formula (the window as a
mask over the whole image) at several image sizes and every window side (both branches), and the
attack's outputs with the patch against those with the whole-image formula (`PATCH_FRACTION = 1`) at
several sizes, seeds and `p_init`."""

import sys

import keras
import numpy as np
import pytest
from keras import ops

import gradkit
from gradkit import backend

_square_ops = sys.modules["gradkit.attacks.square"]  # the module (`gradkit.attacks.square` is the function)


def _tensor(a):
    return backend.to_tensor(np.ascontiguousarray(a, dtype=np.float32))


def _mask_sums(best, ends, u, sides, h, w):
    """The previous formula: the window as a float mask over the whole image."""
    corners = _square_ops._corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
    in_rows, in_cols, _, _ = _square_ops._edges(*corners, sides[0], sides[1], h, w)
    m = ops.expand_dims(ops.cast(ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)),
                                 "float32"), -1)  # fmt: skip
    return np.stack([backend.to_numpy(ops.sum(ops.abs(end - best) * m, axis=(1, 2))) for end in ends])


@pytest.mark.parametrize("shape", [(32, 32, 3), (8, 8, 2), (10, 7, 1)])
def test_window_sums_match_the_whole_image_mask(shape):
    rng, n, eps = np.random.default_rng(sum(shape)), 60, np.float32(0.1)
    h, w, _ = shape
    x0 = rng.uniform(0.0, 1.0, size=(n,) + shape).astype(np.float32)
    ends = [np.clip(x0 + eps, 0, 1), np.clip(x0 - eps, 0, 1)]  # clipped corners: some already equal
    best = np.where(rng.uniform(size=x0.shape) < 0.5, ends[0], ends[1])
    best[: n // 3] = ends[0][: n // 3]  # rows whose window is unchanged by the + corner
    best_t, ends_t = _tensor(best), [_tensor(e) for e in ends]
    for side in range(1, max(h, w) + 1):
        sh, sw = min(side, h), min(side, w)
        sides = backend.to_tensor(np.asarray([sh, sw], np.int32))
        u = _tensor(rng.uniform(size=(n, 2)))
        top, left = _square_ops._corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
        new = backend.to_numpy(_square_ops.window_sums(best_t, ends_t, top, left, sides))
        old = _mask_sums(best_t, ends_t, u, sides, h, w)
        np.testing.assert_allclose(new, old, rtol=1e-6, atol=0)
        tolerance = np.float32(1e-7) * np.float32(sh * sw)
        np.testing.assert_array_equal(new < tolerance, old < tolerance)
        assert (old[0, : n // 3] == 0).all() and (old[1, : n // 3] > 0).any()  # both outcomes are tested
        empty = _square_ops.window_sums(best_t, ends_t, top, left, sides, backend.to_tensor(np.asarray(True)))
        assert not backend.to_numpy(empty).any()


def _square(shape, seed, p_init, x):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape), keras.layers.Flatten(), keras.layers.Dense(4)])
    y = np.argmax(model.predict(x, verbose=0), axis=1)
    return gradkit.square(model, x, y, eps=0.03, n_queries=120, p_init=p_init, seed=seed, clip_values=(0, 1))


@pytest.mark.parametrize("shape", [(16, 16, 3), (12, 9, 1)])
def test_square_linf_outputs_match_the_whole_image_formula(shape, monkeypatch):
    x = np.random.default_rng(0).uniform(0.2, 0.8, size=(40,) + shape).astype(np.float32)
    for seed, p_init in [(0, 0.8), (1, 0.3), (2, 0.05)]:
        patched = _square(shape, seed, p_init, x)
        with monkeypatch.context() as m:
            m.setattr(_square_ops, "PATCH_FRACTION", 1)  # a patch the image's size: the whole-image mask
            whole = _square(shape, seed, p_init, x)
        np.testing.assert_array_equal(patched, whole)
        assert not np.array_equal(patched, x)
