"""Geometry of the Linf and L2 threat models: steepest-ascent directions, projection onto the eps-ball
around the clean input, clipping to the valid range, and uniform random starts.

Every function works on one numpy array (one input of the model) with the batch on axis 0; norms are
per sample. The projection is done before the clipping (as foolbox does); both keep every coordinate
between x0 and the proposed point, so the result lies in the ball and in the box.
"""

import numpy as np

TINY = 1e-12  # floor of a norm before dividing by it (a zero gradient then gives a zero step)


def per_sample_norm(a):
    """Per-sample L2 norms of `a`, shaped to broadcast against it."""
    norms = np.sqrt(np.sum(np.square(a.reshape(len(a), -1)), axis=1))
    return norms.reshape((-1,) + (1,) * (a.ndim - 1))


def direction(g, norm):
    """Steepest-ascent direction of unit norm: sign(g) for Linf, g / ||g||_2 per sample for L2."""
    if norm == np.inf:
        return np.sign(g)
    return g / np.maximum(per_sample_norm(g), TINY)


def project_and_clip(x, x0, eps, norm, clip_values):
    """Projects x onto the eps-ball around the clean x0, then clips to `clip_values`."""
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


def random_start(x0, eps, norm, rng):
    """A point drawn uniformly from the eps-ball around x0: Linf uniform per coordinate; L2 a gaussian
    direction with radius eps * u^(1/d), d the number of features (Voelker et al. 2017)."""
    n, d = len(x0), int(np.prod(x0.shape[1:]))
    if norm == np.inf:
        delta = rng.uniform(-eps, eps, size=x0.shape)
    else:
        u = rng.standard_normal((n, d))
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), TINY)
        delta = (u * (eps * rng.uniform(size=(n, 1)) ** (1.0 / d))).reshape(x0.shape)
    return x0 + delta.astype(x0.dtype)
