"""The per-norm pieces of the minimum-norm attacks (FMN, DDN), one small `keras.ops` function each on
backend tensors with the batch on axis 0: the per-sample Lp norm (L0 counts nonzero coordinates), the
dual norm a distance to the boundary is measured in, and the projection onto the ball of radius `eps`
`(n,)` (one radius per sample) around 0. The numpy `norms` measures returned examples in float64.
"""

import math

import numpy as np
from keras import ops

from gradkit.attacks._geometry import TINY
from gradkit.attacks._l1_ball import project_l0_ball, project_l1_ball

DUAL = {np.inf: 1.0, 2.0: 2.0, 1.0: np.inf}  # Hoelder conjugates: 1/p + 1/q = 1


def flat(a):
    """`a` `(n, ...)` as rows `(n, d)`."""
    return ops.reshape(a, (-1, math.prod(a.shape[1:])))


def row_norm(a, norm):
    """The Lp norm `(n,)` of each row of `a` `(n, ...)`; p = 0 counts its nonzero coordinates."""
    a = flat(a)
    if norm == 0:
        return ops.sum(ops.cast(a != 0, "float32"), axis=1)
    if norm == 1:
        return ops.sum(ops.abs(a), axis=1)
    if norm == 2:
        return ops.sqrt(ops.sum(ops.square(a), axis=1))
    return ops.max(ops.abs(a), axis=1)


def project_ball(delta, eps, norm):
    """`delta` `(n, ...)` projected onto the Lp ball of radius `eps` `(n,)`: L0 keeps the eps largest
    coordinates, L1 is Duchi et al.'s projection, L2 rescales rows longer than eps, Linf clips."""
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


def norms(delta, norm):
    """Per-sample Lp norms `(n,)` float64 of a numpy `delta` `(n, ...)` (L0: nonzero coordinates)."""
    rows = np.asarray(delta, np.float64).reshape(len(delta), -1)
    if norm == 0:
        return np.count_nonzero(rows, axis=1).astype(np.float64)
    return np.linalg.norm(rows, ord=norm, axis=1)
