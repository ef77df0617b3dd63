"""The geometry of the L0, L1, L2 and Linf threat models, one function per rule.

On the device (`keras.ops`, the `*_tensor` functions and the ball projections): per-sample norms, ascent
directions, the projection onto the eps-ball around the clean input followed by the clip to the box,
and the minimum-norm attacks' projection onto a ball of per-sample radius around 0. Every attack's
compiled step uses these.

On the host (numpy), once per attack at its boundary: the random starts (drawn from a numpy
generator, so a seeded start is the same on every backend), their projection, and `inside`, which
undoes the float rounding of `x0 + delta` on the examples an attack returns. The L1 projection there
runs in float64.

The projection comes before the clip (as foolbox does); both keep every coordinate between x0 and the
proposed point, so the result lies in the ball and in the box. L1 projects exactly onto the L1-ball
intersected with the box (Croce & Hein 2021, Lemma 3.1), not a rescaling followed by a clip: a
rescaled point clipped to the box can end far from the closest point of the ball and box.

References:
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (Lemma 3.1, Algorithm 2; the L1-ball and box projection).
    Duchi, Shalev-Shwartz, Singer & Chandra (2008), "Efficient projections onto the l1-ball for learning
    in high dimensions", ICML, https://doi.org/10.1145/1390156.1390191 (Figure 1).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (the step size rule).
"""

import math

import numpy as np
from keras import ops

from gradkit import _checks

TINY = 1e-12  # floor of a norm before dividing by it (a zero gradient then gives a zero step)
DUAL = {np.inf: 1.0, 2.0: 2.0, 1.0: np.inf}  # Hoelder conjugates: 1/p + 1/q = 1


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
    """
    eps, steps = _checks.check_eps(eps), _checks.check_steps(steps)
    return 2.5 * eps / steps if eps > 0 else 1.0


# ---------------------------------------------------------------------------------------------------
# On the device: keras.ops on backend tensors, the batch on axis 0.


def flat(a):
    """`a` `(n, ...)` as rows `(n, d)`."""
    return ops.reshape(a, (-1, math.prod(a.shape[1:])))


def lp_norm(a, norm, axis=-1):
    """`||a||_p` along `axis`, p in (0, 1, 2, inf); p = 0 counts the nonzero coordinates (float32)."""
    if norm == 0:
        return ops.sum(ops.cast(a != 0, "float32"), axis=axis)
    if norm == 1:
        return ops.sum(ops.abs(a), axis=axis)
    if norm == 2:
        return ops.sqrt(ops.sum(ops.square(a), axis=axis))
    return ops.max(ops.abs(a), axis=axis)


def row_norm(a, norm):
    """The Lp norm `(n,)` of each row of `a` `(n, ...)`; p = 0 counts its nonzero coordinates."""
    return lp_norm(flat(a), norm, axis=1)


def per_sample_norm_tensor(a):
    """The per-sample L2 norms of `a` `(n, ...)`, shaped `(n, 1, ..., 1)` to broadcast against it."""
    return ops.reshape(row_norm(a, 2), (-1,) + (1,) * (len(a.shape) - 1))


def direction_tensor(g, norm):
    """The steepest-ascent direction of unit norm per sample, `argmax_{||d||_p <= 1} <g, d>`, which
    attains the dual norm `<g, d> = ||g||_q`: sign(g) (Linf, q = 1), g / ||g||_2 (L2), and for L1
    (q = inf) `sign(g_i) e_i` on the coordinate of largest `|g_i|` (ties: the first in row-major order;
    a zero gradient gives a zero direction). See `steepest_l1_tensor` for the step inside a box."""
    if norm == np.inf:
        return ops.sign(g)
    if norm == 1:
        return steepest_l1_tensor(g, 1.0)
    return g / ops.maximum(per_sample_norm_tensor(g), TINY)


def steepest_l1_tensor(g, budget, lo=None, hi=None):
    """The L1 steepest-ascent step: per sample the `d` maximizing `<g, d>` subject to `||d||_1 <= budget`
    and `lo <= d <= hi`.

    Without a box that is all of `budget` on the coordinate of largest `|g_i|`, with its sign (the
    maximizer of the dual norm: `<g, d> = budget * ||g||_inf`), not `budget * g / ||g||_1`, which
    spreads the budget and gains only `budget * ||g||_2^2 / ||g||_1`. In a box the problem is a
    fractional knapsack: coordinates are filled in decreasing `|g_i|`, each up to its room in the
    direction of `sign(g_i)`, until the budget is spent, so a coordinate at the box's edge passes the
    rest on to the next one. Ties in `|g_i|` are filled in row-major order (the first coordinate
    first, as `np.argmax` picks); coordinates with `g_i = 0` never move.

    Args:
        g: float tensor `(n, ...)`, the gradient to ascend.
        budget: scalar tensor or float >= 0, the L1 length of the step (input units).
        lo, hi: None (no box) or tensors like `g` with `lo <= 0 <= hi`: how far each coordinate may move
            down and up (`clip_values` minus the current point).

    Returns:
        A tensor like `g`, with `||d||_1 <= budget` up to float rounding.
    """
    rows = flat(g)
    a, budget = ops.abs(rows), ops.cast(budget, g.dtype)
    if lo is None:
        room = ops.where(a > 0, budget * ops.ones_like(a), ops.zeros_like(a))
    else:
        room = ops.where(rows > 0, flat(hi), ops.where(rows < 0, -flat(lo), ops.zeros_like(a)))
        room = ops.maximum(room, 0.0)
    order = ops.argsort(-a, axis=1)  # stable on every backend: ties keep their row-major order
    room = ops.take_along_axis(room, order, axis=1)
    taken = ops.clip(budget - (ops.cumsum(room, axis=1) - room), 0.0, room)
    amount = ops.take_along_axis(taken, ops.argsort(order, axis=1), axis=1)
    return ops.reshape(ops.sign(rows) * amount, g.shape)


def clip_tensor(x, lo, hi):
    """`ops.clip(x, lo, hi)` for scalar tensors `lo <= hi`, the same values, as a maximum then a minimum
    (PyTorch's clamp with tensor bounds takes a slow path on the CPU)."""
    return ops.minimum(ops.maximum(x, lo), hi)


def project_and_clip_tensor(x, x0, eps, norm, bounds, mask=None):
    """`x` projected onto the eps-ball around the clean `x0`, then clipped to the box.

    Args:
        x, x0: float tensors `(n, ...)`, the proposed points and the clean inputs.
        eps: a scalar tensor, the radius (an argument of the compiled step, so that another eps or range
            reuses its trace); Linf: or a tensor broadcastable to one input `(1, ...)`, per feature.
        norm: np.inf, 2.0 or 1.0 (L1: the exact projection onto the L1-ball and the box).
        bounds: None or `(lo, hi)` tensors, the valid input range: scalars, or per feature `(1, ...)`.
        mask: None, or a 0/1 tensor `(1, ...)`: the perturbation is multiplied by it first, so that the
            features at 0 stay the clean ones bit for bit and the norm counts only the others.

    Returns:
        A tensor like `x`, inside the ball and the box.
    """
    if mask is not None:
        x = x0 + (x - x0) * ops.cast(mask, x.dtype)
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


def l1_tensor(x, x0, eps, bounds):
    """`project_and_clip_tensor` for L1: the exact projection onto the L1-ball and the box."""
    lo = hi = None
    if bounds is not None:
        lo, hi = ops.cast(bounds[0], x.dtype) - x0, ops.cast(bounds[1], x.dtype) - x0
    x = x0 + project_l1_box(x - x0, eps, lo, hi)
    if bounds is not None:  # the rounding of x0 + delta
        x = clip_tensor(x, ops.cast(bounds[0], x.dtype), ops.cast(bounds[1], x.dtype))
    return x


def _segment_lam(a, room, eps):
    """`lam` `(n,)` solving `sum clip(a - lam, 0, room) = eps` on rows where the clipped `a` is outside
    the ball (else 0); `a`, `room` `(n, d)` >= 0, `eps` `(n,)`. See `project_l1_box`."""
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

    Coordinate by coordinate the closest point is the soft-threshold of `v` at one `lam >= 0` clipped to
    the box, `d_i = sign(v_i) * clip(|v_i| - lam, 0, c_i)` with `c_i = hi_i` where `v_i >= 0`, else
    `-lo_i` (the KKT conditions of a separable problem whose box holds 0; Lemma 3.1 of Croce & Hein
    2021). `lam = 0` where the clipped `v` lies in the ball; else `g(lam) = sum_i clip(|v_i| - lam, 0,
    c_i) = eps`. `g` is piecewise linear and non-increasing with breakpoints `|v_i| - c_i` and `|v_i|`:
    sorting the `2d` breakpoints and summing the slopes gives `g` at each of them, the segment holding
    eps and `lam` on it in closed form (AutoAttack finds the segment by a binary search; here all
    breakpoints are evaluated at once, which compiles without a data-dependent loop). A last rescaling
    absorbs float rounding so that `||d||_1 <= eps` holds in the tensor's dtype.

    Args:
        v: float tensor `(n, ...)`, the proposed perturbations (a point minus the clean input).
        eps: the L1 radius, a scalar or `(n,)` tensor >= 0 (input units).
        lo, hi: None (the plain L1 ball) or tensors like `v` with `lo <= 0 <= hi`, the bounds of the
            perturbation (`clip_values` minus the clean input).

    Returns:
        A tensor like `v`: the closest perturbation inside the ball and the box.
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


def _descending(a):
    """Each row of `a` `(n, d)` sorted in decreasing order."""
    return ops.flip(ops.sort(a, axis=1), axis=1)


def _kth(sorted_rows, k):
    """`sorted_rows[i, k[i]]` `(n, 1)` for int indices `k` `(n,)`."""
    return ops.take_along_axis(sorted_rows, ops.expand_dims(ops.cast(k, "int32"), 1), axis=1)


def project_l1_ball(v, eps):
    """The point of the L1 ball of radius `eps` `(n,)` nearest (L2) to each row of `v` `(n, d)`.

    Rows already inside are returned unchanged; the others are soft-thresholded by theta, found by
    sorting |v| (Duchi et al. 2008, Figure 1): rho = max{j : u_j > (sum_{i<=j} u_i - eps) / j}, theta =
    (sum_{i<=rho} u_i - eps) / rho. `eps` may be inf (no projection).
    """
    a = ops.abs(v)
    l1 = ops.sum(a, axis=1)
    radius = ops.expand_dims(ops.minimum(eps, l1), 1)  # finite where the row is projected
    u = _descending(a)
    css = ops.cumsum(u, axis=1)
    j = ops.cast(ops.arange(1, v.shape[1] + 1), v.dtype)
    rho = ops.sum(ops.cast(u - (css - radius) / j > 0, "int32"), axis=1)
    count = ops.cast(ops.expand_dims(ops.maximum(rho, 1), 1), v.dtype)
    theta = (_kth(css, ops.maximum(rho - 1, 0)) - radius) / count
    w = ops.sign(v) * ops.maximum(a - theta, 0.0)
    return ops.where(ops.expand_dims(l1 > eps, 1), w, v)


def project_l0_ball(v, k):
    """Each row of `v` `(n, d)` with all but its `k` `(n,)` largest-magnitude coordinates set to 0 (ties
    at the k-th magnitude are kept; k <= 0 keeps the largest, as adv-lib's FMN does)."""
    a = ops.abs(v)
    index = ops.clip(ops.cast(k, "int32") - 1, 0, v.shape[1] - 1)
    return ops.where(a < _kth(_descending(a), index), ops.zeros_like(v), v)


def project_ball(delta, eps, norm):
    """`delta` `(n, ...)` projected onto the Lp ball of radius `eps` `(n,)` around 0: L0 keeps the eps
    largest coordinates, L1 is Duchi et al.'s projection, L2 rescales rows longer than eps, Linf clips."""
    rows, radius = flat(delta), ops.expand_dims(ops.cast(eps, delta.dtype), 1)
    if norm == 0:
        rows = project_l0_ball(rows, eps)
    elif norm == 1:
        rows = project_l1_ball(rows, ops.cast(eps, delta.dtype))
    elif norm == 2:
        rows = rows * ops.minimum(radius / ops.maximum(row_norm(rows, 2)[:, None], TINY), 1.0)
    else:
        rows = ops.minimum(ops.maximum(rows, -radius), radius)
    return ops.reshape(rows, delta.shape)


# ---------------------------------------------------------------------------------------------------
# On the host: numpy, once per attack (starts, their projection, the returned examples).


def per_sample_norm(a):
    """The per-sample L2 norms of the numpy array `a`, shaped to broadcast against it."""
    norms = np.sqrt(np.sum(np.square(a.reshape(len(a), -1)), axis=1))
    return norms.reshape((-1,) + (1,) * (a.ndim - 1))


def per_sample_l1(a):
    """The per-sample L1 norms of the numpy array `a`, shaped to broadcast against it."""
    return np.sum(np.abs(a.reshape(len(a), -1)), axis=1).reshape((-1,) + (1,) * (a.ndim - 1))


def norms(delta, norm):
    """The per-sample Lp norms `(n,)` float64 of a numpy `delta` `(n, ...)` (L0: nonzero coordinates)."""
    rows = np.asarray(delta, np.float64)
    rows = rows.reshape(len(rows), math.prod(rows.shape[1:]))  # explicit: no rows is (0, d)
    if norm == 0:
        return np.count_nonzero(rows, axis=1).astype(np.float64)
    return np.linalg.norm(rows, ord=norm, axis=1)


def direction(g, norm):
    """`direction_tensor` on a numpy gradient (the loop of objectives with host gradients)."""
    if norm == np.inf:
        return np.sign(g)
    if norm == 1:
        return steepest_l1(g, 1.0)
    return g / np.maximum(per_sample_norm(g), TINY)


def steepest_l1(g, budget, lo=None, hi=None):
    """`steepest_l1_tensor` on numpy arrays (`lo`, `hi` None or arrays like `g`), in `g`'s dtype."""
    rows = np.asarray(g).reshape(len(g), -1)
    a, budget = np.abs(rows), rows.dtype.type(budget)
    if lo is None:
        room = np.where(a > 0, budget, 0).astype(rows.dtype)
    else:
        up, down = np.reshape(hi, rows.shape), -np.reshape(lo, rows.shape)
        room = np.maximum(np.where(rows > 0, up, np.where(rows < 0, down, 0)), 0).astype(rows.dtype)
    order = np.argsort(-a, axis=1, kind="stable")
    room = np.take_along_axis(room, order, axis=1)
    taken = np.clip(budget - (np.cumsum(room, axis=1) - room), 0, room)
    amount = np.empty_like(taken)
    np.put_along_axis(amount, order, taken, axis=1)
    return (np.sign(rows) * amount).reshape(np.shape(g))


def project_and_clip(x, x0, eps, norm, clip_values, mask=None):
    """`project_and_clip_tensor` on numpy arrays, `clip_values` None or `(min, max)` floats or arrays
    (L1 in float64), `mask` None or a 0/1 array; up to the rounding of `x0 + delta`, which `inside`
    undoes on returned examples."""
    if mask is not None:
        x = x0 + (x - x0) * mask.astype(x0.dtype)
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


def _project_l1(x, x0, eps, clip_values):
    """`project_and_clip` for L1: the exact projection onto the L1-ball and the box, in float64."""
    lo = hi = None
    if clip_values is not None:
        lo, hi = x0.dtype.type(clip_values[0]) - x0, x0.dtype.type(clip_values[1]) - x0
    x = x0 + project_l1_box_host(x - x0, eps, lo, hi).astype(x0.dtype)
    if clip_values is not None:  # the rounding of x0 + delta
        x = np.clip(x, x0.dtype.type(clip_values[0]), x0.dtype.type(clip_values[1]))
    return x


def project_l1_box_host(v, eps, lo=None, hi=None):
    """`project_l1_box` in numpy, in float64 (for the host: start points; keras.ops on numpy arrays
    would compile every op anew for each row count on JAX). Returns float64 like `v`."""
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
    low = np.take_along_axis(breaks, np.clip(j - 1, 0, last), 1)
    mid = (low + np.take_along_axis(breaks, np.clip(j, 0, last), 1)) / 2
    free, saturated = (a - room < mid) & (mid < a), mid <= a - room
    lam = (np.sum(a * free + room * saturated, axis=1) - eps) / np.maximum(free.sum(axis=1), 1)
    lam = np.where(np.minimum(a, room).sum(axis=1) > eps, np.maximum(lam, 0.0), 0.0)
    d = np.sign(v) * np.clip(a - lam[:, None], 0, room)
    d *= np.minimum(1.0, eps / np.maximum(np.abs(d).sum(axis=1), TINY))[:, None]
    return d.reshape(shape)


def random_start(x0, eps, norm, rng):
    """A point drawn uniformly from the eps-ball around the numpy `x0`: Linf uniform per coordinate; L2 a
    gaussian direction with radius eps * u^(1/d), d the number of features (Voelker et al. 2017); L1
    the first d of d + 1 exponential draws divided by their sum, with random signs (Barthe, Guedon,
    Mendelson & Naor 2005). `rng`: a `np.random.RandomState`."""
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


def worst_norm(x0, clip, norm, mask=None):
    """The largest norm a perturbation inside the box (on the features of `mask`, None: all) can have,
    per sample `(n,)` float32 (inf without a box): the cap of a minimum-norm attack's radius, as in
    adv-lib."""
    if clip is None:
        return np.full(len(x0), np.inf, np.float32)
    far = np.maximum(x0 - clip[0], clip[1] - x0)
    far = (far if mask is None else far * mask).reshape(len(x0), -1).astype(np.float64)
    size = np.count_nonzero(far, axis=1) if norm == 0 else np.linalg.norm(far, ord=norm, axis=1)
    return size.astype(np.float32)


def inside(x, x0, eps, norm):
    """`x` with the rounding of `x0 + delta` undone where it left the ball: `x0 + float32(0.1)` can lie
    0.10000002 from `x0`. Linf: the coordinates whose exact distance to `x0` exceeds eps move onto the
    nearest float inside the ball; L2 and L1: the rows whose norm (in float64) exceeds eps are scaled
    into the ball. Afterwards `|x - x0| <= eps` holds in `x`'s dtype and in float64."""
    if norm == np.inf and np.ndim(eps):
        return _inside_linf_features(x, x0, np.asarray(eps, np.float64))
    if norm == np.inf:
        limit = x.dtype.type(eps)  # the largest value of x's dtype that is <= eps
        limit = np.nextafter(limit, x.dtype.type(0)) if float(limit) > eps else limit
        return _inside_linf(x, x0, limit)
    for shrink in (1 - 1e-7, 1 - 1e-6, 1 - 1e-5):
        delta = x.astype(np.float64) - x0.astype(np.float64)
        size = per_sample_l1(delta) if norm == 1 else per_sample_norm(delta)
        if not (size > eps).any():
            return x
        scaled = (x0 + (delta * (eps * shrink / np.maximum(size, TINY))).astype(x.dtype)).astype(x.dtype)
        x = np.where(size > eps, scaled, x)
    return x


def _inside_linf(x, x0, limit, chunk=1 << 15):
    """`x` clipped to `[face(x0, -limit), face(x0, limit)]`, the floats nearest `x0 -+ limit` that are
    not beyond them: exactly the coordinates farther than `limit` from `x0` move, onto the ball's face.
    Computed in slices of `chunk` values that stay in the CPU's cache; a slice with no coordinate within
    rounding of the face is left as it is, and `x` itself is returned when no slice changes."""
    flat_x, flat0, out = x.reshape(-1), x0.reshape(-1), None
    for start in range(0, flat_x.size, chunk):
        a, a0 = flat_x[start : start + chunk], flat0[start : start + chunk]
        if not (np.abs(a - a0) >= limit).any():
            continue
        if out is None:
            out = flat_x.copy()
        out[start : start + chunk] = np.minimum(np.maximum(a, _face(a0, -limit)), _face(a0, limit))
    return x if out is None else out.reshape(x.shape)


def _inside_linf_features(x, x0, eps):
    """`inside` for a per-feature Linf radius `eps` (float64, broadcastable to one input): the
    coordinates farther than their eps from `x0` move onto the float nearest the face inside it."""
    wide = x0.astype(np.float64)
    for _ in range(3):  # the face rounded in x's dtype, then at most a float or two towards x0
        far = np.abs(x.astype(np.float64) - wide) > eps
        if not far.any():
            return x
        face = np.clip(x.astype(np.float64), wide - eps, wide + eps).astype(x.dtype)
        face = np.where(np.abs(face.astype(np.float64) - wide) > eps, np.nextafter(face, x0), face)
        x = np.where(far, face, x)
    return x


def _face(x0, step):
    """The float of x0's dtype nearest `x0 + step` that is not beyond it (`step` a float of that dtype):
    the rounded sum, moved one float back towards x0 where it overshot. TwoSum (Knuth 1969) gives the
    rounding error exactly, `x0 + step == u + err`; the move back is on the integer view (-1 or +1 by
    the sign of u), with `nextafter` only for a rounded sum of zero."""
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
