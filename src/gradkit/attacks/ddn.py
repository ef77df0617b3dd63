"""The Decoupled Direction and Norm attack (DDN; Rony et al. 2019, Algorithm 1), L2: each sample's
smallest adversarial example.

Algorithm. With `delta_k = x_k - x0` and `g_k` the gradient of the cross-entropy at `x_k` (targeted:
its negative at the target), `alpha_k` cosine-annealed from 1 to 0.01:

    delta' = delta_k + alpha_k g_k / ||g_k||_2
    eps_k = (1 - gamma) eps_{k-1}  where x_k is adversarial, else (1 + gamma) eps_{k-1}  (capped)
    x_{k+1} = clip(x0 + eps_k delta' / ||delta'||_2)

eps starts at `init_norm`; a sample whose gradient is exactly zero steps along a fixed random unit
direction (drawn from `seed`). Unlike adv-lib's default, the iterates are not quantized to 256 levels.
Each sample keeps its smallest adversarial iterate; the state lives on the device.

References:
    Rony, Hafemann, Oliveira, Ben Ayed, Sabourin & Granger (2019), "Decoupling direction and norm for
    efficient gradient-based L2 adversarial attacks and defenses", CVPR, https://arxiv.org/abs/1811.09600
    (Algorithm 1; reference code: adv-lib `decoupled_direction_norm.py`).
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _engine as engine
from gradkit.attacks import geometry
from gradkit.attacks._frame import Frame
from gradkit.attacks.fmn import Y_REQUIRED, refuse_eps


def ddn(
    model,
    x,
    y=None,
    *,
    steps=100,
    init_norm=1.0,
    gamma=0.05,
    targeted=False,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    batch_size=None,
    seed=0,
    output=None,
    norm=2,
    preprocessing=None,
    **options,
):
    """Decoupled Direction and Norm attack (Rony et al. 2019): each sample's smallest L2 adversarial
    example. The algorithm is in `gradkit.attacks.ddn`'s module docstring; success is the model's real
    decision rule, as in `gradkit.fmn`.

    Args:
        model, x, clip_values, batch_size, output, mask, attack_inputs: as in `gradkit.fmn`.
        y: untargeted: true class ids (defaults to the predictions); targeted: the target class ids.
        steps: iterations, int >= 1. Defaults to 100.
        init_norm: the first radius eps, float > 0 (L2, input units). Defaults to 1.0.
        gamma: the factor eps changes by, in [0, 1]. Defaults to 0.05.
        targeted: False (default) or True.
        seed: int >= 0 or None, the random directions of zero gradients. Defaults to 0.
        norm: 2 (or "l2"), the only norm DDN takes (for a uniform signature). Defaults to 2.
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest (L2) adversarial example found, inside
        `clip_values`; the clean `x` where none was found.

    Raises:
        TypeError: `eps` given (use `gradkit.min_norm` or `gradkit.robustness_curve(..., attack="ddn")`),
            another unknown keyword, several inputs of an ensemble.
        ValueError: `norm` other than 2, steps < 1, init_norm <= 0, gamma outside [0, 1], targeted
            without `y`, `x` outside `clip_values`; before any work.

    References:
        Rony, Hafemann, Oliveira, Ben Ayed, Sabourin & Granger (2019), https://arxiv.org/abs/1811.09600
        (Algorithm 1).

    Example:
        >>> x_adv = gradkit.ddn(model, x, y, steps=100, clip_values=(0, 1))  # doctest: +SKIP
    """
    refuse_eps("ddn", options)
    _checks.check_norm(norm, allowed=(2.0,), attack="DDN (an L2 attack; use gradkit.fmn for 0, 1, inf)")
    steps = _checks.check_steps(steps)
    init_norm = _checks.check_real(init_norm, "init_norm", minimum=0, strict=True)
    gamma = _checks.check_real(gamma, "gamma", minimum=0, maximum=1)
    seed = _checks.check_seed(seed)
    frame = Frame(
        model,
        x,
        y,
        loss="ce",
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        batch_size=batch_size,
        output=output,
        targeted=targeted,
        single_input="DDN",
        y_required=Y_REQUIRED,
        preprocessing=preprocessing,
    ).as_float32()
    x0, clip = frame.x0, frame.clip_values is not None
    per_row = {"eps": np.full(len(x0), init_norm, np.float32)}
    x_adv, frame.success = engine.run_min_norm(
        frame,
        update(frame.objective, clip, frame.targeted),
        "ddn",
        dict(clip=clip, targeted=frame.targeted),
        start=x0,
        per_row=per_row,
        constants=dict(gamma=gamma),
        steps=steps,
        norm=2.0,
        extra={"noise": _noise(x0, seed) * (1.0 if frame.mask is None else frame.mask)},
    )
    return frame.finish(x_adv)


def update(objective, clip, targeted):
    """The step's update `update(state, (values, logits), grad, fixed) -> state` (Algorithm 1)."""

    def step(state, aux, grad, fixed):
        _, logits = aux
        success = engine.hit(objective, logits, fixed, targeted)
        state, delta, _ = engine.record_smallest(state, fixed, success, 2.0)
        size = geometry.row_norm(grad, 2.0)
        zero = size < geometry.TINY  # a zero gradient: a random direction instead (fixed per sample)
        grad = ops.where(
            engine.rows_mask(zero, grad), fixed["noise"], grad / _rows(ops.maximum(size, geometry.TINY), grad)
        )
        alpha = engine.cosine(fixed, state["k"], 1.0, 0.01)
        delta = delta + ops.cast(alpha, grad.dtype) * grad
        gamma = fixed["gamma"]
        eps = ops.minimum(
            ops.where(success, (1.0 - gamma) * state["eps"], (1.0 + gamma) * state["eps"]), fixed["worst"]
        )
        delta = delta * _rows(eps / ops.maximum(geometry.row_norm(delta, 2.0), geometry.TINY), delta)
        x = fixed["x0"] + delta
        if clip:
            x = ops.clip(x, fixed["lo"], fixed["hi"])
        return dict(state, x=x, eps=eps, k=state["k"] + 1)

    return step


def _rows(v, like):
    return ops.reshape(v, (-1,) + (1,) * (len(like.shape) - 1))


def _noise(x0, seed):
    """Unit-L2 random directions, one per sample, shaped like `x0` (numpy, seeded)."""
    g = np.random.default_rng(seed).standard_normal(x0.shape)
    size = np.linalg.norm(g.reshape(len(g), -1), axis=1).reshape((-1,) + (1,) * (g.ndim - 1))
    return (g / size).astype(np.float32)
