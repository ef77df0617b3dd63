"""Euclidean projection onto the L1 ball (Duchi et al. 2008) and onto the L0 ball (keep the k largest
coordinates), per sample, in `keras.ops` on flat rows `(n, d)`: the projections of the minimum-norm
attacks, traced inside their compiled step.

References:
    Duchi, Shalev-Shwartz, Singer & Chandra (2008), "Efficient projections onto the l1-ball for learning
    in high dimensions", ICML, https://doi.org/10.1145/1390156.1390191 (Figure 1).
"""

from keras import ops


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
