"""Decoupled Direction and Norm attack (DDN; Rony et al. 2019, Algorithm 1), L2, on the attack engine.

Each step evaluates the cross-entropy and its gradient at the iterate, records it when adversarial and
smaller, takes a step of size alpha (cosine-annealed from 1 to 0.01) along the L2-normalized gradient,
then rescales the perturbation to norm exactly eps, where eps shrinks by (1 - gamma) after an
adversarial iterate and grows by (1 + gamma) otherwise, and clips to the box.
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _minimum as minimum
from gradkit.attacks._engine import rows_mask
from gradkit.attacks._geometry import TINY
from gradkit.attacks._norm_balls import row_norm


def _rows(v, like):
    return ops.reshape(v, (-1,) + (1,) * (len(like.shape) - 1))


def _update(objective, clip, targeted):
    def update(state, aux, grad, fixed):
        _, logits = aux
        success = minimum.hit(objective, logits, fixed, targeted)
        state, delta, _ = minimum.record(state, fixed, success, 2.0)
        size = row_norm(grad, 2.0)
        zero = size < 1e-12  # a zero gradient: a random direction instead (fixed per sample)
        grad = ops.where(rows_mask(zero, grad), fixed["noise"], grad / _rows(ops.maximum(size, TINY), grad))
        alpha = minimum.cosine(fixed, state["k"], 1.0, 0.01)
        delta = delta + ops.cast(alpha, grad.dtype) * grad
        gamma = fixed["gamma"]
        eps = ops.minimum(ops.where(success, (1.0 - gamma) * state["eps"], (1.0 + gamma) * state["eps"]),
                          fixed["worst"])  # fmt: skip
        delta = delta * _rows(eps / ops.maximum(row_norm(delta, 2.0), TINY), delta)
        x = fixed["x0"] + delta
        if clip:
            x = ops.clip(x, fixed["lo"], fixed["hi"])
        return dict(state, x=x, eps=eps, k=state["k"] + 1)

    return update


def _noise(x0, seed):
    """Unit-L2 random directions, one per sample, shaped like `x0` (numpy, seeded)."""
    g = np.random.default_rng(seed).standard_normal(x0.shape)
    return (g / np.linalg.norm(g.reshape(len(g), -1), axis=1).reshape((-1,) + (1,) * (g.ndim - 1))).astype(
        np.float32
    )


def ddn_run(model, x, y=None, *, steps=100, init_norm=1.0, gamma=0.05, targeted=False, clip_values=None,
            batch_size=None, seed=0, output=None, norm=2, **options):  # fmt: skip
    """`gradkit.ddn` returning `(x_adv, found)`, found bool `(n,)`."""
    minimum.refuse_eps("ddn", options)
    _checks.check_norm(norm, allowed=(2.0,), attack="DDN (an L2 attack; use gradkit.fmn for 0, 1, inf)")
    steps = _checks.check_steps(steps)
    init_norm = _checks.check_real(init_norm, "init_norm", minimum=0, strict=True)
    gamma = _checks.check_real(gamma, "gamma", minimum=0, maximum=1)
    seed = _checks.check_seed(seed)
    objective, x0, labels, clip = minimum.setup(
        model,
        x,
        y,
        loss="ce",
        targeted=targeted,
        clip_values=clip_values,
        batch_size=batch_size,
        output=output,
    )
    per_row = {"eps": np.full(len(x0), init_norm, np.float32)}
    update = _update(objective, clip is not None, targeted)
    return minimum.run(objective, update, "ddn", dict(clip=clip is not None, targeted=targeted), x0, labels,
                       start=x0, per_row=per_row, constants=dict(gamma=gamma), steps=steps, norm=2.0,
                       clip=clip, extra={"noise": _noise(x0, seed)})  # fmt: skip


def ddn(model, x, y=None, *, steps=100, init_norm=1.0, gamma=0.05, targeted=False, clip_values=None,
        batch_size=None, seed=0, output=None, **options):  # fmt: skip
    """Decoupled Direction and Norm attack (Rony et al. 2019): each sample's smallest L2 adversarial
    example.

    Algorithm 1 of the paper: a step of size alpha (cosine-annealed from 1 to 0.01) along the
    L2-normalized gradient of the cross-entropy (targeted: its negative at the target), then the
    perturbation is rescaled to L2 norm exactly eps and clipped to `clip_values`; eps starts at
    `init_norm` and changes by (1 - gamma) after an adversarial iterate, (1 + gamma) otherwise (capped at
    the largest norm in the box). A sample whose gradient is exactly zero steps along a fixed random
    direction (drawn from `seed`). Unlike adv-lib's default, the iterates are not quantized to 256
    levels. Success is the model's real decision rule, as in `gradkit.fmn`; the state lives on the
    device.

    Args:
        model, x, clip_values, batch_size, output: as in `gradkit.fmn`.
        y: untargeted: true class ids (defaults to the predictions); targeted: the target class ids.
        steps: iterations, int >= 1. Defaults to 100.
        init_norm: the first radius eps, float > 0 (L2, input units). Defaults to 1.0.
        gamma: the factor eps changes by, in [0, 1]. Defaults to 0.05.
        targeted: False (default) or True.
        seed: int >= 0 or None, the random directions of zero gradients. Defaults to 0.

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest (L2) adversarial example found, inside
        `clip_values`; the clean `x` where none was found.

    Raises:
        TypeError: `eps` given (use `gradkit.min_norm` or `gradkit.robustness_curve(..., attack="ddn")`),
            another unknown keyword, several inputs.
        ValueError: `norm` other than 2, steps < 1, init_norm <= 0, gamma outside [0, 1], targeted
            without `y`, `x` outside `clip_values`; before any work.

    References:
        Rony, Hafemann, Oliveira, Ben Ayed, Sabourin & Granger (2019), "Decoupling direction and norm for
        efficient gradient-based L2 adversarial attacks and defenses", CVPR,
        https://arxiv.org/abs/1811.09600 (Algorithm 1).

    Example:
        >>> x_adv = gradkit.ddn(model, x, y, steps=100, clip_values=(0, 1))  # doctest: +SKIP
    """
    return ddn_run(
        model, x, y, steps=steps, init_norm=init_norm, gamma=gamma, targeted=targeted,
        clip_values=clip_values, batch_size=batch_size, seed=seed, output=output, **options,
    )[0]  # fmt: skip
