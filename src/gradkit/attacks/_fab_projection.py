"""FAB's projection: the smallest step onto a hyperplane that stays in the box, for Linf, L2 and L1.

Given points `t` `(N, D)`, hyperplane normals `w` `(N, D)` and the signed offsets `c = w . t - b` `(N,)`,
`project` returns the `d` of smallest `||d||_p` with `w . (t + d) = b` and `lo <= t + d <= hi`; where
the box does not reach the hyperplane, the `d` that moves `w . (t + d)` furthest towards `b` (every
useful coordinate to its bound). All in `keras.ops`, traced into FAB's compiled step.

Why the closed forms hold (Croce & Hein 2020, Section 3, the problems of eq. (4) and (5)): flip the
signs so that `c >= 0`; coordinate i can then lower `w . d` by `|w_i| e_i` with `d_i = -sign(w_i) e_i`,
`0 <= e_i <= m_i` (`m_i` the room to the bound it moves towards). Minimizing `||e||_p` subject to
`sum |w_i| e_i = c`:
- Linf: `e_i = min(lambda, m_i)`; L2 (KKT): `e_i = min(lambda |w_i|, m_i)`. The reached decrease
  `g(lambda)` is piecewise linear and increasing, with breakpoints `r_i = m_i` (Linf) or `m_i / |w_i|`
  (L2); `lambda` is read off the segment where `g` crosses `c`, found by walking the segments from
  `lambda = 0` (Newton's method on the concave `g`, no sort).
- L1 (a fractional knapsack): fill the coordinates in decreasing `|w_i|`, each up to `m_i`, until the
  decrease reaches `c`.
Without a box the minimizers are the textbook ones: `-c sign(w) / ||w||_1`, `-c w / ||w||_2^2`, and
`-c / w_k` on one coordinate of largest `|w_k|`.

References:
    Croce & Hein (2020), "Minimally distorted adversarial examples with a fast adaptive boundary
    attack", ICML, https://arxiv.org/abs/1907.02044 (Section 3; reference code: fra31/auto-attack,
    `autoattack/fab_projections.py`, for the box [0, 1]).
"""

import numpy as np
from keras import ops

_TINY = 1e-12
_FAR = 1e30  # the breakpoint of a coordinate that cannot move the hyperplane's value (w_i = 0)


def lp_norm(a, norm, axis=-1):
    """`||a||_p` along `axis` for p in (inf, 2, 1)."""
    if norm == np.inf:
        return ops.max(ops.abs(a), axis=axis)
    if norm == 2:
        return ops.sqrt(ops.sum(ops.square(a), axis=axis))
    return ops.sum(ops.abs(a), axis=axis)


def dual(norm):
    """The dual exponent q of p (1/p + 1/q = 1): inf <-> 1, 2 <-> 2."""
    return {np.inf: 1.0, 2.0: 2.0, 1.0: np.inf}[float(norm)]


def project(t, w, c, norm, bounds):
    """The smallest step `d` `(N, D)` from `t` onto `{z: w . z = w . t - c}` inside `bounds`.

    Args:
        t, w: float32 `(N, D)` points and hyperplane normals; c: float32 `(N,)`, `w . t - b`.
        norm: np.inf, 2.0 or 1.0. bounds: None (no box) or `(lo, hi)` scalar tensors.

    Returns:
        float32 `(N, D)`; zero on the coordinates where `w` is zero.
    """
    if bounds is None:
        return _free(w, c, norm)
    sign = ops.where(c >= 0, 1.0, -1.0)
    w, c = w * ops.expand_dims(sign, -1), c * sign  # now c >= 0: lower w . d by c
    lo, hi = ops.cast(bounds[0], t.dtype), ops.cast(bounds[1], t.dtype)
    room = ops.maximum(ops.where(w > 0, t - lo, hi - t), 0.0)
    aw = ops.abs(w)
    e = _knapsack(aw, room, c) if norm == 1 else _breakpoints(aw, room, c, norm)
    return ops.where(aw > 0, -ops.sign(w) * e, 0.0)


def _free(w, c, norm):
    c = ops.expand_dims(c, -1)
    if norm == np.inf:
        return -c * ops.sign(w) / ops.maximum(ops.sum(ops.abs(w), axis=-1, keepdims=True), _TINY)
    if norm == 2:
        return -c * w / ops.maximum(ops.sum(ops.square(w), axis=-1, keepdims=True), _TINY)
    top = ops.argmax(ops.abs(w), axis=-1)
    pick = ops.expand_dims(ops.cast(top, "int32"), -1) == ops.arange(w.shape[-1], dtype="int32")
    safe = ops.where(ops.abs(w) > 0, w, 1.0)
    return ops.where(pick, -c / safe, 0.0)


def _breakpoints(aw, room, c, norm):
    """Linf and L2: `e_i = min(lambda s_i', m_i)` with lambda where the reached decrease crosses c.

    The reached decrease `g` is concave, so Newton's method from `lambda = 0` walks its segments from
    below: on the segment of the breakpoints passed so far (`r_i <= lambda`: at their bound) the root is
    `(c - done) / rate` (`done` the decrease of those, `rate` the slope of the others); each step passes
    at least one breakpoint until none lies before that root, which is then exact. A handful of passes
    over the coordinates (two on average in FAB-T on digits, at most three), where a sort of every row
    measured the larger part of FAB's step on JAX and TensorFlow."""
    if norm == np.inf:
        slope, r = aw, ops.where(aw > 0, room, _FAR)
    else:
        slope, r = ops.square(aw), ops.where(aw > 0, room / ops.maximum(aw, _TINY), _FAR)
    full = aw * room  # the decrease of a coordinate at its bound

    def root(lam):
        passed = r <= ops.expand_dims(lam, -1)
        done = ops.sum(ops.where(passed, full, 0.0), axis=-1)
        rate = ops.sum(ops.where(passed, 0.0, slope), axis=-1)
        return ops.where(rate > 0, (c - done) / ops.maximum(rate, _TINY), _FAR)

    def crossed(lam, new):  # a breakpoint in (lam, new]: the segment of `new` is not that of `lam`
        inside = ops.logical_and(r > ops.expand_dims(lam, -1), r <= ops.expand_dims(new, -1))
        return ops.any(inside, axis=-1)

    def body(lam, new, moved):  # `moved`: rows whose root passed a breakpoint (computed once a pass)
        lam = ops.where(moved, new, lam)
        new = root(lam)
        return lam, new, crossed(lam, new)

    lam = ops.zeros_like(c)
    new = root(lam)
    _, lam, _ = ops.while_loop(lambda lam, new, moved: ops.any(moved), body, (lam, new, crossed(lam, new)))
    lam = ops.expand_dims(lam, -1)
    step = lam if norm == np.inf else lam * aw
    return ops.minimum(step, room)


def _knapsack(aw, room, c):
    """L1: fill the coordinates by decreasing |w_i|, each up to its room, until the decrease is c."""
    order = ops.argsort(-aw, axis=-1)
    aw_s = ops.take_along_axis(aw, order, axis=-1)
    room_s = ops.take_along_axis(room, order, axis=-1)
    cap = aw_s * room_s
    before = ops.cumsum(cap, axis=-1) - cap
    e_s = ops.minimum(ops.maximum((ops.expand_dims(c, -1) - before) / ops.maximum(aw_s, _TINY), 0.0), room_s)
    e_s = ops.where(aw_s > 0, e_s, 0.0)
    return ops.take_along_axis(e_s, ops.argsort(order, axis=-1), axis=-1)
