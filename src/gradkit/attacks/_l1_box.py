"""The L1 threat model's geometry in `keras.ops`: the exact Euclidean projection onto the L1-ball
intersected with the box, and APGD-L1's sparse step (Croce & Hein 2021).

Projection. For a proposed perturbation `v` `(n, ...)`, a radius `eps` and per-coordinate bounds
`lo <= 0 <= hi` of the perturbation (the box `clip_values` seen from the clean input: `lo = min - x0`,
`hi = max - x0`), the closest point `d` with `||d||_1 <= eps` and `lo <= d <= hi` is, coordinate by
coordinate, the soft-threshold of `v` at one `lam >= 0` clipped to the box:
`d_i = sign(v_i) * clip(|v_i| - lam, 0, c_i)`, with `c_i = hi_i` where `v_i >= 0` and `-lo_i` elsewhere
(the KKT conditions of a separable problem whose box contains 0; the paper's Lemma 3.1 and Algorithm 2).
`lam = 0` when the clipped `v` already lies in the ball; otherwise `lam` solves
`g(lam) = sum_i clip(|v_i| - lam, 0, c_i) = eps`. `g` is piecewise linear and non-increasing with
breakpoints `|v_i| - c_i` (slope -1 more) and `|v_i|` (slope +1 back); sorting the `2d` breakpoints and
summing the slopes gives `g` at each of them, the segment holding `eps`, and on it `lam` in closed form
from the coordinates that segment leaves free (`sum(free |v|) + sum(saturated c) - eps) / #free`).
AutoAttack finds the segment by a binary search over the same sorted breakpoints; here all breakpoints
are evaluated at once (a cumulative sum), which compiles without a data-dependent loop. A last
rescaling absorbs float rounding so that `||d||_1 <= eps` holds in the tensor's dtype.

Sparse step. APGD-L1 moves along `sign(g)` on the coordinates where `|g|` is among the largest
`topk * d` (ties included), scaled to unit L1 norm (`autopgd_base.py`'s L1 branch); `topk`, a fraction
per sample, adapts at the checkpoints to the sparsity of the best point (`_apgd_l1.py`).

References:
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (Lemma 3.1, Algorithm 2; reference code: fra31/auto-attack,
    `autoattack/autopgd_base.py`, `L1_projection` and the L1 step).
"""

import math

import numpy as np
from keras import ops

TINY = 1e-12  # the floor of a norm before dividing by it


def flat(a):
    """`a` `(n, ...)` as `(n, d)`."""
    return ops.reshape(a, (-1, math.prod(a.shape[1:])))


def l1_norm(a):
    """Per-sample L1 norms `(n,)` of `a` `(n, ...)`."""
    return ops.sum(ops.abs(flat(a)), axis=1)


def l0_norm(a):
    """Per-sample counts `(n,)` of the nonzero coordinates of `a` `(n, ...)`, as `a`'s float dtype."""
    return ops.sum(ops.cast(ops.not_equal(flat(a), 0), a.dtype), axis=1)


def _segment_lam(a, room, eps):
    """`lam` `(n,)` solving `sum clip(a - lam, 0, room) = eps` on rows where the clipped `a` is outside
    the ball (else 0); `a`, `room` `(n, d)` >= 0, `eps` `(n,)`."""
    d = a.shape[1]
    breaks = ops.concatenate([a - room, a], axis=1)
    slopes = ops.concatenate([-ops.ones_like(a), ops.ones_like(a)], axis=1)
    order = ops.argsort(breaks, axis=1)
    breaks = ops.take_along_axis(breaks, order, axis=1)
    slope = ops.cumsum(ops.take_along_axis(slopes, order, axis=1), axis=1)  # on [b_j, b_j+1]
    steps = slope[:, :-1] * (breaks[:, 1:] - breaks[:, :-1])
    at_breaks = ops.sum(room, axis=1, keepdims=True) + ops.concatenate(
        [ops.zeros_like(steps[:, :1]), ops.cumsum(steps, axis=1)], axis=1
    )  # g(b_j), non-increasing in j
    j = ops.sum(
        ops.cast(at_breaks > eps[:, None], "int32"), axis=1, keepdims=True
    )  # g(b_j-1) > eps >= g(b_j)
    low = ops.take_along_axis(breaks, ops.clip(j - 1, 0, 2 * d - 1), axis=1)
    high = ops.take_along_axis(breaks, ops.clip(j, 0, 2 * d - 1), axis=1)
    mid = (low + high) / 2
    free = ops.cast(ops.logical_and(a - room < mid, mid < a), a.dtype)
    saturated = ops.cast(mid <= a - room, a.dtype)
    lam = (ops.sum(a * free + room * saturated, axis=1) - eps) / ops.maximum(ops.sum(free, axis=1), 1)
    outside = ops.sum(ops.minimum(a, room), axis=1) > eps
    return ops.where(outside, ops.maximum(lam, 0), ops.zeros_like(lam))


def project_l1_box(v, eps, lo=None, hi=None):
    """The Euclidean projection of the perturbations `v` onto `{d : ||d||_1 <= eps, lo <= d <= hi}`.

    Args:
        v: float tensor `(n, ...)`, the proposed perturbations (a point minus the clean input).
        eps: the L1 radius, a scalar or `(n,)` tensor >= 0 (input units).
        lo, hi: None (no box: the plain L1 ball) or tensors like `v` with `lo <= 0 <= hi`, the bounds
            of the perturbation (`clip_values` minus the clean input).

    Returns:
        A tensor like `v`: the closest perturbation inside the ball and the box (see the module
        docstring).

    References:
        Croce & Hein (2021), ICML, https://arxiv.org/abs/2103.01208 (Lemma 3.1, Algorithm 2).
    """
    shape, a = v.shape, ops.abs(flat(v))
    eps = ops.broadcast_to(ops.reshape(ops.cast(eps, v.dtype), (-1,)), (a.shape[0],))
    if lo is None:  # the plain ball: a room no coordinate reaches
        room = ops.sum(a, axis=1, keepdims=True) + ops.ones_like(a)
    else:
        room = ops.where(flat(v) >= 0, flat(hi), -flat(lo))
    lam = _segment_lam(a, room, eps)
    d = ops.sign(flat(v)) * ops.clip(a - lam[:, None], 0, room)
    rescale = ops.minimum(1.0, eps / ops.maximum(ops.sum(ops.abs(d), axis=1), TINY))  # float rounding
    return ops.reshape(d * rescale[:, None], shape)


def project_l1_box_host(v, eps, lo=None, hi=None):
    """`project_l1_box` in numpy, in float64 (for the host: start points and returned examples; keras.ops
    on numpy arrays would compile every op anew for each row count on JAX). Same arguments as numpy
    arrays; returns float64 like `v`."""
    shape, v = np.shape(v), np.asarray(v, np.float64).reshape(len(v), -1)
    a, eps = np.abs(v), np.broadcast_to(np.asarray(eps, np.float64).reshape(-1), (len(v),))
    if lo is None:
        room = np.broadcast_to(a.sum(axis=1, keepdims=True) + 1.0, a.shape)
    else:
        room = np.where(v >= 0, np.reshape(hi, v.shape), -np.reshape(lo, v.shape)).astype(np.float64)
    breaks = np.concatenate([a - room, a], axis=1)
    order = np.argsort(breaks, axis=1, kind="stable")
    breaks = np.take_along_axis(breaks, order, axis=1)
    slope = np.cumsum(np.take_along_axis(np.concatenate([-np.ones_like(a), np.ones_like(a)], 1), order, 1), 1)
    at_breaks = room.sum(axis=1, keepdims=True) + np.concatenate(
        [np.zeros((len(v), 1)), np.cumsum(slope[:, :-1] * np.diff(breaks, axis=1), axis=1)], axis=1
    )
    j = np.sum(at_breaks > eps[:, None], axis=1, keepdims=True)
    last = breaks.shape[1] - 1
    mid = (
        np.take_along_axis(breaks, np.clip(j - 1, 0, last), 1)
        + np.take_along_axis(breaks, np.clip(j, 0, last), 1)
    ) / 2
    free, saturated = (a - room < mid) & (mid < a), mid <= a - room
    lam = (np.sum(a * free + room * saturated, axis=1) - eps) / np.maximum(free.sum(axis=1), 1)
    lam = np.where(np.minimum(a, room).sum(axis=1) > eps, np.maximum(lam, 0.0), 0.0)
    d = np.sign(v) * np.clip(a - lam[:, None], 0, room)
    d *= np.minimum(1.0, eps / np.maximum(np.abs(d).sum(axis=1), TINY))[:, None]
    return d.reshape(shape)


def sparse_direction(grad, topk):
    """APGD-L1's step direction: `sign(g)` on the coordinates whose `|g|` is at least the
    `floor((1 - topk) * d)`-th smallest (the top `topk` fraction, ties included), divided by their
    count, so that the direction has unit L1 norm.

    Args:
        grad: float tensor `(n, ...)`, the gradient of the objective.
        topk: float tensor `(n,)`, the fraction of coordinates to move per sample, in [0, 1].

    Returns:
        A tensor like `grad`.
    """
    g = flat(grad)
    d = g.shape[1]
    index = ops.cast(ops.clip((1.0 - ops.cast(topk, g.dtype)) * d, 0, d - 1), "int32")[:, None]
    threshold = ops.take_along_axis(ops.sort(ops.abs(g), axis=1), index, axis=1)
    signs = ops.sign(g) * ops.cast(ops.abs(g) >= threshold, g.dtype)
    return ops.reshape(signs / (ops.sum(ops.abs(signs), axis=1, keepdims=True) + 1e-10), grad.shape)
