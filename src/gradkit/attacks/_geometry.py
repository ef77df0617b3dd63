"""Geometry of the Linf, L2 and L1 threat models: ascent directions, projection onto the eps-ball around
the clean input, clipping to the valid range, and uniform random starts.

Every function works on one numpy array (one input of the model) with the batch on axis 0; norms are
per sample. The projection is done before the clipping (as foolbox does); both keep every coordinate
between x0 and the proposed point, so the result lies in the ball and in the box. The `*_tensor`
functions are the same rules in `keras.ops` on backend tensors, for the steps compiled whole
(`_engine.py`): the state of an attack stays on the device between steps.

L1: the direction is `g / ||g||_1` per sample (foolbox's and ART's L1 gradient step), and the
projection is the exact Euclidean projection onto the L1-ball intersected with the box
(`_l1_box.project_l1_box`, Croce & Hein 2021), not a rescaling followed by a clip: a rescaled point
clipped to the box can end far from the closest point of the ball and box, and a clip after the
projection onto the ball alone keeps the result inside both but not closest.
"""

import math

import numpy as np
from keras import ops

from gradkit import _checks, backend
from gradkit.attacks import _l1_box

TINY = 1e-12  # floor of a norm before dividing by it (a zero gradient then gives a zero step)


def default_eps_step(eps, steps):
    """PGD's default step size: 2.5 * eps / steps, the rule of Madry et al. (2018), with which `steps`
    steps can cross the eps-ball from any start.

    Args:
        eps: the radius of the ball, a float >= 0 in input units (any norm).
        steps: the number of steps, an int >= 1.

    Returns:
        float, the step size in input units; 1.0 at eps 0, where every step is projected back anyway.

    Raises:
        ValueError: eps < 0 or not finite, steps < 1. TypeError: a non-numeric eps, a non-integer steps.

    References:
        Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
        adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
    """
    eps, steps = _checks.check_eps(eps), _checks.check_steps(steps)
    return 2.5 * eps / steps if eps > 0 else 1.0


def per_sample_norm(a):
    """Per-sample L2 norms of `a`, shaped to broadcast against it."""
    norms = np.sqrt(np.sum(np.square(a.reshape(len(a), -1)), axis=1))
    return norms.reshape((-1,) + (1,) * (a.ndim - 1))


def per_sample_l1(a):
    """Per-sample L1 norms of `a`, shaped to broadcast against it."""
    return np.sum(np.abs(a.reshape(len(a), -1)), axis=1).reshape((-1,) + (1,) * (a.ndim - 1))


def direction(g, norm):
    """Ascent direction of unit norm: sign(g) for Linf, g / ||g||_2 (L2) or g / ||g||_1 (L1) per sample."""
    if norm == np.inf:
        return np.sign(g)
    return g / np.maximum(per_sample_l1(g) if norm == 1 else per_sample_norm(g), TINY)


def _project_l1(x, x0, eps, clip_values):
    """`project_and_clip` for L1: the exact projection onto the L1-ball and the box (`_l1_box`)."""
    lo = hi = None
    if clip_values is not None:
        lo, hi = x0.dtype.type(clip_values[0]) - x0, x0.dtype.type(clip_values[1]) - x0
    delta = _l1_box.project_l1_box_host(x - x0, eps, lo, hi)
    x = x0 + delta.astype(x0.dtype)
    if clip_values is not None:  # the rounding of x0 + delta
        x = np.clip(x, x0.dtype.type(clip_values[0]), x0.dtype.type(clip_values[1]))
    return x


def project_and_clip(x, x0, eps, norm, clip_values):
    """Projects x onto the eps-ball around the clean x0, then clips to `clip_values` (up to the rounding
    of `x0 + delta`, which `inside` undoes on the examples an attack returns)."""
    if norm == 1:
        return _project_l1(x, x0, eps, clip_values)
    e = x0.dtype.type(eps)
    delta = x - x0
    if norm == np.inf:
        delta = np.clip(delta, -e, e)
    else:
        delta = delta * np.minimum(1, e / np.maximum(per_sample_norm(delta), TINY))
    x = x0 + delta
    if clip_values is not None:
        x = np.clip(x, x0.dtype.type(clip_values[0]), x0.dtype.type(clip_values[1]))
    return x


def inside(x, x0, eps, norm):
    """`x` with the rounding of `x0 + delta` undone where it left the ball: `x0 + float32(0.1)` can lie
    0.10000002 from `x0`. Linf: the coordinates whose exact distance to `x0` exceeds eps are moved onto
    the nearest float inside the ball (`_inside_linf`); L2 and L1: the rows whose norm (in float64)
    exceeds eps are scaled into the ball. Afterwards `|x - x0| <= eps` holds in `x`'s dtype and in
    float64."""
    if norm == np.inf:
        limit = x.dtype.type(eps)  # the largest value of x's dtype that is <= eps
        limit = np.nextafter(limit, x.dtype.type(0)) if float(limit) > eps else limit
        return _inside_linf(x, x0, limit)
    for shrink in (1 - 1e-7, 1 - 1e-6, 1 - 1e-5):
        delta = x.astype(np.float64) - x0.astype(np.float64)
        norms = per_sample_l1(delta) if norm == 1 else per_sample_norm(delta)
        if not (norms > eps).any():
            return x
        scaled = (x0 + (delta * (eps * shrink / np.maximum(norms, TINY))).astype(x.dtype)).astype(x.dtype)
        x = np.where(norms > eps, scaled, x)
    return x


def _inside_linf(x, x0, limit, chunk=1 << 15):
    """`x` clipped to `[face(x0, -limit), face(x0, limit)]`, the floats nearest `x0 -+ limit` that are
    not beyond them: exactly the coordinates farther than `limit` from `x0` move, onto the ball's face.
    Computed in slices of `chunk` values that stay in the CPU's cache (at 1,024x32x32x3 and every
    coordinate on the face: 13 ms against 75 ms for whole-array passes); a slice with no coordinate
    within rounding of the face (`|x - x0| >= limit` in float, which any farther one satisfies) is
    left as it is, and `x` itself is returned when no slice changes."""
    flat, flat0, out = x.reshape(-1), x0.reshape(-1), None
    for start in range(0, flat.size, chunk):
        a, a0 = flat[start : start + chunk], flat0[start : start + chunk]
        if not (np.abs(a - a0) >= limit).any():
            continue
        if out is None:
            out = flat.copy()
        out[start : start + chunk] = np.minimum(np.maximum(a, _face(a0, -limit)), _face(a0, limit))
    return x if out is None else out.reshape(x.shape)


def _face(x0, step):
    """The float of x0's dtype nearest `x0 + step` that is not beyond it (`step` a float of that dtype):
    the rounded sum, moved one float back towards x0 where it overshot. TwoSum (Knuth 1969) gives the
    rounding error exactly, `x0 + step == u + err`; the move back is on the integer view (-1 or +1
    by the sign of u), with `nextafter` only for a rounded sum of zero."""
    u = x0 + step
    z = u - x0
    err = (x0 - (u - z)) + (step - z)
    beyond = err < 0 if step > 0 else err > 0
    if not beyond.any():
        return u
    bits = u.view(np.dtype(f"i{u.dtype.itemsize}"))
    sign = np.sign(u).astype(bits.dtype)
    out = (bits - beyond * sign if step > 0 else bits + beyond * sign).view(u.dtype)
    zero = beyond & (u == 0)
    if zero.any():
        out[zero] = np.nextafter(u[zero], x0[zero])
    return out


def random_start(x0, eps, norm, rng):
    """A point drawn uniformly from the eps-ball around x0: Linf uniform per coordinate; L2 a gaussian
    direction with radius eps * u^(1/d), d the number of features (Voelker et al. 2017); L1 the first d
    of d + 1 exponential draws divided by their sum, with random signs (uniform in the ball: Barthe,
    Guedon, Mendelson & Naor 2005)."""
    n, d = len(x0), int(np.prod(x0.shape[1:]))
    if norm == np.inf:
        delta = rng.uniform(-eps, eps, size=x0.shape)
    elif norm == 1:
        e = rng.exponential(size=(n, d + 1))
        signs = np.where(rng.uniform(size=(n, d)) < 0.5, -1.0, 1.0)
        delta = (eps * signs * e[:, :d] / e.sum(axis=1, keepdims=True)).reshape(x0.shape)
    else:
        u = rng.standard_normal((n, d))
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), TINY)
        delta = (u * (eps * rng.uniform(size=(n, 1)) ** (1.0 / d))).reshape(x0.shape)
    return x0 + delta.astype(x0.dtype)


def per_sample_norm_tensor(a):
    """`per_sample_norm` of a backend tensor, shaped `(n, 1, ..., 1)`."""
    norms = ops.sqrt(ops.sum(ops.square(ops.reshape(a, (-1, math.prod(a.shape[1:])))), axis=1))
    return ops.reshape(norms, (-1,) + (1,) * (len(a.shape) - 1))


def direction_tensor(g, norm):
    """`direction` on a backend tensor: sign(g) for Linf, g / ||g||_2 (L2) or g / ||g||_1 (L1) per sample."""
    if norm == np.inf:
        return ops.sign(g)
    if norm == 1:
        return g / ops.maximum(ops.reshape(_l1_box.l1_norm(g), (-1,) + (1,) * (len(g.shape) - 1)), TINY)
    return g / ops.maximum(per_sample_norm_tensor(g), TINY)


def step_tensor(x, x0, g, size, eps, norm, bounds):
    """One projected gradient step on backend tensors: `x + size * direction(g)` projected onto the
    ball around `x0` and clipped (`size`, `eps` and `bounds` as in `project_and_clip_tensor`). `g`
    must be the step's own gradient, used by nothing else: on PyTorch the Linf step is computed in its
    memory (`backend.linf_step`, the same values without a full-size tensor per operation)."""
    if norm == np.inf and backend.linf_step is not None:
        return backend.linf_step(x, x0, g, size, eps, bounds)
    moved = x + ops.cast(size, x.dtype) * direction_tensor(g, norm)
    return project_and_clip_tensor(moved, x0, eps, norm, bounds)


def project_and_clip_tensor(x, x0, eps, norm, bounds):
    """`project_and_clip` on backend tensors: `eps` a scalar tensor, `bounds` None or `(lo, hi)` scalar
    tensors (arguments of the compiled step, so that another eps or range reuses its trace)."""
    eps = ops.cast(eps, x.dtype)
    if norm == 1:
        return l1_tensor(x, x0, eps, bounds)
    if norm == np.inf:
        x = x0 + clip_tensor(x - x0, -eps, eps)
    else:
        delta = x - x0
        x = x0 + delta * ops.minimum(1.0, eps / ops.maximum(per_sample_norm_tensor(delta), TINY))
    if bounds is not None:
        x = clip_tensor(x, ops.cast(bounds[0], x.dtype), ops.cast(bounds[1], x.dtype))
    return x


def clip_tensor(x, lo, hi):
    """`ops.clip(x, lo, hi)` for scalar tensors `lo <= hi`, the same values, as a maximum then a minimum:
    PyTorch's clamp with tensor bounds takes a slow path on the CPU (measured 3x the two ops on a
    1,024x32x32x3 float32 batch); elsewhere the two ops fuse (XLA) or are what clip runs (TensorFlow)."""
    return ops.minimum(ops.maximum(x, lo), hi)


def l1_tensor(x, x0, eps, bounds):
    """`project_and_clip_tensor` for L1: the exact projection onto the L1-ball and the box."""
    lo = hi = None
    if bounds is not None:
        lo, hi = ops.cast(bounds[0], x.dtype) - x0, ops.cast(bounds[1], x.dtype) - x0
    x = x0 + _l1_box.project_l1_box(x - x0, eps, lo, hi)
    if bounds is not None:  # the rounding of x0 + delta
        x = clip_tensor(x, ops.cast(bounds[0], x.dtype), ops.cast(bounds[1], x.dtype))
    return x
