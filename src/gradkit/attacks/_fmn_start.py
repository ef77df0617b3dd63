"""FMN's warm start: a binary search, per sample, on the segment (in the norm's own sense) from the clean
input to a given adversarial starting point, for the point nearest the clean input that is still
adversarial (Pintor et al. 2021, Sec. 3). Forward passes only, before the compiled loop (numpy)."""

import numpy as np

from gradkit.gradients import check_x


def _mid_points(x0, x1, t, norm):
    """The point at `t` `(n,)` in [0, 1] between x0 (t = 0) and x1 (t = 1): L2 on the segment; Linf the
    difference clipped to [-t, t]; L1 each coordinate shrunk by 1 - t; L0 the ceil(t * d) largest
    coordinates kept (inputs in [0, 1], as adv-lib's mid points)."""
    delta = (x1 - x0).reshape(len(x0), -1)
    tt = t[:, None]
    if norm == 2:
        out = delta * tt
    elif norm == np.inf:
        out = np.clip(delta, -tt, tt)
    elif norm == 1:
        out = np.where(np.abs(delta) <= 1 - tt, 0.0, np.sign(delta) * (np.abs(delta) - (1 - tt)))
    else:
        k = np.maximum(np.ceil(t * delta.shape[1]).astype(int), 1)
        kth = -np.sort(-np.abs(delta), axis=1)[np.arange(len(delta)), np.minimum(k, delta.shape[1]) - 1]
        out = np.where(np.abs(delta) < kth[:, None], 0.0, delta)
    return (x0 + out.reshape(x0.shape)).astype(np.float32)


def boundary_start(objective, x0, labels, starting_points, norm, targeted, steps):
    """The start of FMN's loop: the binary-searched point between `x0` and `starting_points`.

    Raises:
        ValueError: `starting_points` misshaped or not all adversarial (before the loop).
    """
    x1, _ = check_x(objective.ensemble.models[0], starting_points)
    if x1.shape != x0.shape:
        raise ValueError(f"`starting_points` must be shaped like `x` {x0.shape}. Received: shape {x1.shape}")

    def adversarial(x):
        decision = objective.decide(objective.forward(x, labels, labels)[1])
        return decision == labels if targeted else decision != labels

    if not adversarial(x1).all():
        raise ValueError("`starting_points` must all be adversarial (the target reached when targeted, "
                         "else misclassified): FMN searches the boundary between them and `x`.")  # fmt: skip
    lower, upper = np.zeros(len(x0)), np.ones(len(x0))
    for _ in range(steps):
        t = (lower + upper) / 2
        hit = adversarial(_mid_points(x0, x1, t, norm))
        lower, upper = np.where(hit, lower, t), np.where(hit, t, upper)
    return _mid_points(x0, x1, upper, norm)
