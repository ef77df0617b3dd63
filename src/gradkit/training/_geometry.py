"""The Linf / L2 geometry of the inner attack as `keras.ops` on tensors, so it runs inside the training step.

The same rules as `gradkit.attacks` (which works on numpy arrays between compiled calls): a steepest-ascent
step (sign for Linf, the per-sample unit gradient for L2), projection onto the eps-ball around the clean
input and then clipping to `clip_values` (both keep every coordinate between the clean and the proposed
point, so the result lies in the ball and in the box), and a uniform random start in the ball.
"""

import math

import numpy as np
from keras import ops, random

TINY = 1e-12  # floor of a norm before dividing by it (a zero gradient then gives a zero step)


def _per_sample_norm(a):
    """Per-sample L2 norms of `a` (batch first), shaped `(batch, 1, ..., 1)` to broadcast against it."""
    features = math.prod(a.shape[1:])
    norms = ops.sqrt(ops.sum(ops.square(ops.reshape(a, (-1, features))), axis=1))
    return ops.reshape(norms, (-1,) + (1,) * (len(a.shape) - 1))


def direction(g, norm):
    """Steepest-ascent direction of unit norm: sign(g) for Linf, g / ||g||_2 per sample for L2."""
    if norm == np.inf:
        return ops.sign(g)
    return g / ops.maximum(_per_sample_norm(g), TINY)


def project_and_clip(x, x0, eps, norm, clip_values):
    """`x` projected onto the eps-ball around the clean `x0`, then clipped to `clip_values` (or None)."""
    delta = x - x0
    if norm == np.inf:
        delta = ops.clip(delta, -eps, eps)
    else:
        delta = delta * ops.minimum(1.0, eps / ops.maximum(_per_sample_norm(delta), TINY))
    x = x0 + delta
    if clip_values is not None:
        x = ops.clip(x, clip_values[0], clip_values[1])
    return x


def random_start(x0, eps, norm, seed):
    """A point drawn uniformly from the eps-ball around `x0` (Linf: uniform per coordinate; L2: a gaussian
    direction with radius eps * u^(1/d), d the number of features; Voelker et al. 2017).

    Args:
        x0: float tensor `(batch, ...)`, the clean inputs.
        eps: float >= 0, the radius.
        norm: `np.inf` or 2.0.
        seed: a `keras.random.SeedGenerator` (its state advances: a new draw every call and step).
    """
    shape = ops.shape(x0)
    if norm == np.inf:
        return x0 + random.uniform(shape, -eps, eps, dtype=x0.dtype, seed=seed)
    u = random.normal(shape, dtype=x0.dtype, seed=seed)
    u = u / ops.maximum(_per_sample_norm(u), TINY)
    features = math.prod(x0.shape[1:])
    radius = random.uniform(ops.shape(_per_sample_norm(u)), dtype=x0.dtype, seed=seed) ** (1.0 / features)
    return x0 + u * eps * radius


def replaced_rows(batch_like, ratio):
    """Boolean mask `(batch,)`: the first `ceil(ratio * batch)` rows, those the adversarial rows replace
    (`fit` shuffles, so these are a random `ratio` of the data)."""
    n = ops.shape(batch_like)[0]
    index = ops.cast(ops.arange(n), "float32")
    return index < ratio * ops.cast(n, "float32")
