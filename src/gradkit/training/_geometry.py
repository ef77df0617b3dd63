"""The Linf / L2 geometry of the inner attack as `keras.ops` on tensors, so it runs inside the training step.

The attack engine's own `keras.ops` geometry (`gradkit.attacks`): a steepest-ascent
step (sign for Linf, the per-sample unit gradient for L2), projection onto the eps-ball around the clean
input and then clipping to `clip_values` (both keep every coordinate between the clean and the proposed
point, so the result lies in the ball and in the box), and a uniform random start in the ball.
"""

import math

import numpy as np
from keras import ops, random

from gradkit.attacks import TINY, per_sample_norm_tensor
from gradkit.attacks import direction_tensor as direction  # noqa: F401 - the attacks' own step
from gradkit.attacks import project_and_clip_tensor as project_and_clip  # noqa: F401 - and projection


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
    u = u / ops.maximum(per_sample_norm_tensor(u), TINY)
    features = math.prod(x0.shape[1:])
    per_sample = ops.shape(per_sample_norm_tensor(u))
    radius = random.uniform(per_sample, dtype=x0.dtype, seed=seed) ** (1.0 / features)
    return x0 + u * eps * radius


def replaced_rows(batch_like, ratio):
    """Boolean mask `(batch,)`: the first `ceil(ratio * batch)` rows, those the adversarial rows replace
    (`fit` shuffles, so these are a random `ratio` of the data)."""
    n = ops.shape(batch_like)[0]
    index = ops.cast(ops.arange(n), "float32")
    return index < ratio * ops.cast(n, "float32")
