"""The Fast Minimum-Norm attack (FMN; Pintor et al. 2021, Algorithm 1) for L0, L1, L2 and Linf: each
sample's smallest adversarial example.

Algorithm. With `delta_k = x_k - x0`, the logit margin `L` (untargeted: max_{j != y} z_j - z_y;
targeted: z_t - max_{j != t} z_j) and its gradient `g_k` at `x_k`:

    eps_k = min(eps_{k-1} (1 - gamma_k), ||delta*||)     where x_k is adversarial (lines 7-8)
            eps_{k-1} (1 + gamma_k)                       where not, after a first success
            ||delta_k|| + |L| / ||g_k||_q                 before any success (the linear estimate)
    delta_{k+1} = P_eps_k(delta_k + alpha_k g_k / ||g_k||_2),    x_{k+1} = clip(x0 + delta_{k+1})

with `P` the projection onto the ball of radius eps_k (L0: keep the eps largest coordinates; L1:
Duchi et al.; L2: rescale; Linf: clip), `q` the dual norm, `delta*` the smallest adversarial
perturbation so far, and eps capped at the largest norm inside the box. L0 moves eps by whole
coordinates. `alpha` anneals from `alpha_init` to `alpha_final` and `gamma` from `gamma_init` to
`gamma_final` (cosine). A given adversarial start is first moved towards `x0` by a binary search on
the segment between them (Sec. 3). The state lives on the device: one compiled step per iteration.

References:
    Pintor, Roli, Brendel & Biggio (2021), "Fast minimum-norm adversarial attacks through adaptive norm
    constraints", NeurIPS, https://arxiv.org/abs/2102.12827 (Algorithm 1; reference code: adv-lib
    `fast_minimum_norm.py`).
    Duchi, Shalev-Shwartz, Singer & Chandra (2008), "Efficient projections onto the l1-ball for learning
    in high dimensions", ICML (the L1 projection).
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _engine as engine
from gradkit.attacks import geometry
from gradkit.attacks._frame import Frame
from gradkit.gradients import check_x

NORMS = (0.0, 1.0, 2.0, np.inf)
Y_REQUIRED = "`y` (the target classes) is required when targeted=True. Received: y=None"


def fmn(
    model,
    x,
    y=None,
    *,
    norm=np.inf,
    steps=100,
    targeted=False,
    alpha_init=1.0,
    alpha_final=None,
    gamma_init=0.05,
    gamma_final=0.001,
    starting_points=None,
    binary_search_steps=10,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    batch_size=None,
    seed=0,
    output=None,
    preprocessing=None,
    **options,
):
    """Fast Minimum-Norm attack (Pintor et al. 2021): each sample's smallest adversarial example, in
    L0, L1, L2 or Linf. The algorithm is in `gradkit.attacks.fmn`'s module docstring; success is the
    model's real decision rule (argmax; the weighted hard vote of an ensemble or boosted model, whose
    margin is the alpha-weighted sum of the members' margins).

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a fitted boosting
            estimator.
        x: float32 `(n, *input_shape)` inside `clip_values`.
        y: untargeted: true class ids `(n,)` or one-hot (defaults to the model's predictions);
            targeted: the target class ids (required).
        norm: 0, 1, 2 or np.inf (default; "l0", "l1", "l2", "linf" too). L0 counts changed coordinates.
        steps: iterations, int >= 1. Defaults to 100.
        targeted: False (default) or True.
        alpha_init, alpha_final: step size at the first and (asymptotically) the last step, floats > 0 /
            >= 0 in input units. Defaults to 1.0 and alpha_init / 100.
        gamma_init, gamma_final: the factor eps changes by, in [0, 1]. Defaults to 0.05 and 0.001.
        starting_points: None, or adversarial inputs shaped like `x`: the loop then starts from a binary
            search (`binary_search_steps` forward passes) on the way from `x` to them.
        binary_search_steps: int >= 0. Defaults to 10.
        clip_values: None (no box) or `(min, max)`. eps is capped at the largest norm inside the box.
            Per-feature arrays too. mask, attack_inputs: as in `gradkit.apgd`.
        batch_size: rows per compiled call; defaults as in `gradkit.apgd`.
        seed: int >= 0 or None; FMN is deterministic (kept for a uniform signature). Defaults to 0.
        output: name or index of the attacked output of a multi-output model.
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest adversarial example found (in the norm),
        inside `clip_values`; the clean `x` where none was found.

    Raises:
        TypeError: `eps` given (FMN takes none: use `gradkit.min_norm` or `gradkit.robustness_curve(...,
            attack="fmn")` for accuracies at given eps), another unknown keyword, several inputs of an
            ensemble.
        ValueError: a norm other than 0, 1, 2, inf; steps < 1; gamma outside [0, 1]; targeted without
            `y`; `x` outside `clip_values`; starting points not all adversarial; before any work.

    References:
        Pintor, Roli, Brendel & Biggio (2021), https://arxiv.org/abs/2102.12827 (Algorithm 1).

    Example:
        >>> x_adv = gradkit.fmn(model, x, y, norm=2, steps=100, clip_values=(0, 1))  # doctest: +SKIP
    """
    refuse_eps("fmn", options)
    norm, steps, constants = _check(
        norm, steps, alpha_init, alpha_final, gamma_init, gamma_final, binary_search_steps, seed
    )
    frame = Frame(
        model,
        x,
        y,
        loss="margin",
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        batch_size=batch_size,
        output=output,
        targeted=targeted,
        single_input="FMN",
        y_required=Y_REQUIRED,
        preprocessing=preprocessing,
    ).as_float32()
    x0, targeted = frame.x0, frame.targeted
    start = x0
    if starting_points is not None:
        start = boundary_start(frame, starting_points, norm, binary_search_steps)
    eps0 = np.full(len(x0), np.inf if norm else 1.0, np.float32)
    if norm == 0 and starting_points is not None:  # L0 starts from the start's count, as adv-lib
        eps0 = np.count_nonzero((start - x0).reshape(len(x0), -1), axis=1).astype(np.float32)
    clip = frame.clip_values is not None
    x_adv, frame.success = engine.run_min_norm(
        frame,
        update(frame.objective, norm, clip, targeted),
        "fmn",
        dict(norm=norm, clip=clip, targeted=targeted),
        start=start,
        per_row={"eps": eps0},
        constants=constants,
        steps=steps,
        norm=norm,
    )
    return frame.finish(x_adv)


def refuse_eps(name, options):
    """TypeError when `eps` (or any other unknown keyword) reaches a minimum-norm attack."""
    if "eps" in options:
        raise TypeError(
            f"{name} is a minimum-norm attack and takes no `eps`: it returns each sample's smallest "
            "adversarial example. For the accuracy at given eps use gradkit.min_norm(...).accuracy_at(eps) "
            f"or gradkit.robustness_curve(..., attack={name!r}). Received: eps={options['eps']!r}"
        )
    if options:
        raise TypeError(f"{name}() got unexpected keyword arguments: {sorted(options)}")


def _check(norm, steps, alpha_init, alpha_final, gamma_init, gamma_final, binary_search_steps, seed):
    norm = _checks.check_norm(norm, allowed=NORMS, attack="FMN")
    steps = _checks.check_steps(steps)
    alpha_init = _checks.check_real(alpha_init, "alpha_init", minimum=0, strict=True)
    alpha_final = alpha_init / 100 if alpha_final is None else alpha_final
    alpha_final = _checks.check_real(alpha_final, "alpha_final", minimum=0)
    gamma_init = _checks.check_real(gamma_init, "gamma_init", minimum=0, maximum=1)
    gamma_final = _checks.check_real(gamma_final, "gamma_final", minimum=0, maximum=1)
    _checks.check_int(binary_search_steps, "binary_search_steps", minimum=0)
    _checks.check_seed(seed)
    constants = dict(
        alpha_init=alpha_init, alpha_final=alpha_final, gamma_init=gamma_init, gamma_final=gamma_final
    )
    return norm, steps, constants


def update(objective, norm, clip, targeted):
    """The step's update `update(state, (values, logits), grad, fixed) -> state` (Algorithm 1)."""

    def step(state, aux, grad, fixed):
        values, logits = aux
        success = engine.hit(objective, logits, fixed, targeted)
        state, delta, size = engine.record_smallest(state, fixed, success, norm)
        k = state["k"]
        alpha = engine.cosine(fixed, k, fixed["alpha_init"], fixed["alpha_final"])
        gamma = engine.cosine(fixed, k, fixed["gamma_init"], fixed["gamma_final"])
        eps = _radius(state, fixed, values, grad, success, size, gamma, norm)
        scale = ops.reshape(
            ops.maximum(geometry.row_norm(grad, 2), geometry.TINY), (-1,) + (1,) * (len(grad.shape) - 1)
        )
        delta = delta + ops.cast(alpha, grad.dtype) * grad / scale
        x = fixed["x0"] + geometry.project_ball(delta, eps, norm)
        if clip:
            x = ops.clip(x, fixed["lo"], fixed["hi"])
        return dict(state, x=x, eps=eps, k=k + 1)

    return step


def _radius(state, fixed, values, grad, success, size, gamma, norm):
    """The next eps `(n,)`: Algorithm 1, lines 7-12 (L0 in integer steps)."""
    eps, best, found = state["eps"], state["best_norm"], state["found"]
    if norm == 0:
        down = ops.minimum(ops.minimum(eps - 1.0, ops.floor(eps * (1.0 - gamma))), best)
        up = ops.maximum(eps + 1.0, ops.floor(eps * (1.0 + gamma)))
        eps = ops.maximum(ops.where(success, down, up), 0.0)
    else:
        dual = geometry.row_norm(grad, geometry.DUAL[norm])
        boundary = size + ops.abs(values) / ops.maximum(dual, geometry.TINY)
        eps = ops.where(
            success, ops.minimum(eps * (1.0 - gamma), best), ops.where(found, eps * (1.0 + gamma), boundary)
        )
    return ops.minimum(eps, fixed["worst"])


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


def boundary_start(frame, starting_points, norm, steps):
    """FMN's warm start: per sample, a binary search (forward passes only, numpy) on the segment (in the
    norm's own sense) from the clean input to `starting_points`, for the point nearest the clean input
    that is still adversarial.

    Raises:
        ValueError: `starting_points` misshaped or not all adversarial (before the loop).
    """
    objective, x0, labels, targeted = frame.objective, frame.x0, frame.labels, frame.targeted
    if frame.inputs is not None:  # several inputs: their flat rows
        starting_points = frame.inputs.flatten(starting_points)
    x1, _ = check_x(objective.ensemble.models[0], starting_points)
    x1 = frame.keep_masked(x1) if x1.shape == x0.shape else x1  # the fixed features are the clean ones
    if x1.shape != x0.shape:
        raise ValueError(f"`starting_points` must be shaped like `x` {x0.shape}. Received: shape {x1.shape}")

    def adversarial(x):
        decision = objective.decide(objective.forward(x, labels, labels)[1])
        return decision == labels if targeted else decision != labels

    if not adversarial(x1).all():
        raise ValueError(
            "`starting_points` must all be adversarial (the target reached when targeted, "
            "else misclassified): FMN searches the boundary between them and `x`."
        )
    lower, upper = np.zeros(len(x0)), np.ones(len(x0))
    for _ in range(steps):
        t = (lower + upper) / 2
        hit = adversarial(_mid_points(x0, x1, t, norm))
        lower, upper = np.where(hit, lower, t), np.where(hit, t, upper)
    return _mid_points(x0, x1, upper, norm)
