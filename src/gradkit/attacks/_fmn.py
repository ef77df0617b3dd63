"""Fast Minimum-Norm attack (FMN; Pintor et al. 2021, Algorithm 1) for L0, L1, L2 and Linf on the attack
engine: the whole state (iterate, radius eps, the smallest adversarial example) stays on the device.

Each step evaluates the logit margin and its gradient at the iterate, records it when adversarial and
smaller, shrinks the radius eps by (1 - gamma) where adversarial (to at most the best norm), else grows
it by (1 + gamma) or, before any success, jumps to the linear estimate of the distance to the boundary
(|margin| / ||grad||_dual); then it takes a step of size alpha along the L2-normalized gradient,
projects onto the eps-ball and clips to the box. alpha and gamma follow cosine annealing.
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _minimum as minimum
from gradkit.attacks._fmn_start import boundary_start
from gradkit.attacks._geometry import TINY
from gradkit.attacks._norm_balls import DUAL, project_ball, row_norm

NORMS = (0.0, 1.0, 2.0, np.inf)


def _radius(state, fixed, values, grad, success, size, gamma, norm):
    """The next eps `(n,)`: Algorithm 1, lines 7-12 (L0 in integer steps)."""
    eps, best, found = state["eps"], state["best_norm"], state["found"]
    if norm == 0:
        down = ops.minimum(ops.minimum(eps - 1.0, ops.floor(eps * (1.0 - gamma))), best)
        up = ops.maximum(eps + 1.0, ops.floor(eps * (1.0 + gamma)))
        eps = ops.maximum(ops.where(success, down, up), 0.0)
    else:
        dual = row_norm(grad, DUAL[norm])
        boundary = size + ops.abs(values) / ops.maximum(dual, TINY)
        eps = ops.where(
            success, ops.minimum(eps * (1.0 - gamma), best), ops.where(found, eps * (1.0 + gamma), boundary)
        )
    return ops.minimum(eps, fixed["worst"])


def _update(objective, norm, clip, targeted):
    def update(state, aux, grad, fixed):
        values, logits = aux
        success = minimum.hit(objective, logits, fixed, targeted)
        state, delta, size = minimum.record(state, fixed, success, norm)
        k = state["k"]
        alpha = minimum.cosine(fixed, k, fixed["alpha_init"], fixed["alpha_final"])
        gamma = minimum.cosine(fixed, k, fixed["gamma_init"], fixed["gamma_final"])
        eps = _radius(state, fixed, values, grad, success, size, gamma, norm)
        scale = ops.reshape(ops.maximum(row_norm(grad, 2), TINY), (-1,) + (1,) * (len(grad.shape) - 1))
        delta = delta + ops.cast(alpha, grad.dtype) * grad / scale
        x = fixed["x0"] + project_ball(delta, eps, norm)
        if clip:
            x = ops.clip(x, fixed["lo"], fixed["hi"])
        return dict(state, x=x, eps=eps, k=k + 1)

    return update


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
    return norm, steps, dict(alpha_init=alpha_init, alpha_final=alpha_final, gamma_init=gamma_init,
                             gamma_final=gamma_final)  # fmt: skip


def fmn_run(model, x, y=None, *, norm=np.inf, steps=100, targeted=False, alpha_init=1.0, alpha_final=None,
            gamma_init=0.05, gamma_final=0.001, starting_points=None, binary_search_steps=10,
            clip_values=None, batch_size=None, seed=0, output=None, **options):  # fmt: skip
    """`gradkit.fmn` returning `(x_adv, found)`, found bool `(n,)`."""
    minimum.refuse_eps("fmn", options)
    norm, steps, constants = _check(norm, steps, alpha_init, alpha_final, gamma_init, gamma_final,
                                    binary_search_steps, seed)  # fmt: skip
    objective, x0, labels, clip = minimum.setup(
        model,
        x,
        y,
        loss="margin",
        targeted=targeted,
        clip_values=clip_values,
        batch_size=batch_size,
        output=output,
    )
    start = x0
    if starting_points is not None:
        start = boundary_start(objective, x0, labels, starting_points, norm, targeted, binary_search_steps)
    eps0 = np.full(len(x0), np.inf if norm else 1.0, np.float32)
    if norm == 0 and starting_points is not None:  # L0 starts from the start's count, as adv-lib
        eps0 = np.count_nonzero((start - x0).reshape(len(x0), -1), axis=1).astype(np.float32)
    update = _update(objective, norm, clip is not None, targeted)
    return minimum.run(objective, update, "fmn", dict(norm=norm, clip=clip is not None, targeted=targeted),
                       x0, labels, start=start, per_row={"eps": eps0}, constants=constants, steps=steps,
                       norm=norm, clip=clip)  # fmt: skip


def fmn(model, x, y=None, *, norm=np.inf, steps=100, targeted=False, alpha_init=1.0, alpha_final=None,
        gamma_init=0.05, gamma_final=0.001, starting_points=None, binary_search_steps=10, clip_values=None,
        batch_size=None, seed=0, output=None, **options):  # fmt: skip
    """Fast Minimum-Norm attack (Pintor et al. 2021): each sample's smallest adversarial example.

    Algorithm 1 of the paper, for L0, L1, L2 and Linf: a step of size alpha along the L2-normalized
    gradient of the logit margin (untargeted: max_{j != y} z_j - z_y; targeted: z_t - max_{j != t} z_j),
    then a projection onto the ball of an adaptive radius eps and a clip to `clip_values`. Where the
    iterate is adversarial, eps shrinks by (1 - gamma) (to at most the smallest norm found); where not,
    it grows by (1 + gamma), or before the first success it jumps to the linear estimate of the distance
    to the decision boundary, ||delta|| + |margin| / ||grad||_dual. L0 moves eps one coordinate at
    least. alpha anneals from `alpha_init` to `alpha_final`, gamma from `gamma_init` to `gamma_final`
    (cosine). Success is the model's real decision rule (argmax; the weighted hard vote of an
    ensemble or boosted model, whose margin is the alpha-weighted sum of the members' margins). The
    state lives on the device: one compiled step per iteration (`_engine.py`).

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
        batch_size: rows per compiled call; defaults as in `gradkit.apgd`.
        seed: int >= 0 or None; FMN is deterministic (kept for a uniform signature). Defaults to 0.
        output: name or index of the attacked output of a multi-output model.

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest adversarial example found (in the norm),
        inside `clip_values`; the clean `x` where none was found.

    Raises:
        TypeError: `eps` given (FMN takes none: use `gradkit.min_norm` or `gradkit.robustness_curve(...,
            attack="fmn")` for accuracies at given eps), another unknown keyword, several inputs.
        ValueError: a norm other than 0, 1, 2, inf; steps < 1; gamma outside [0, 1]; targeted without
            `y`; `x` outside `clip_values`; starting points not all adversarial; before any work.

    References:
        Pintor, Roli, Brendel & Biggio (2021), "Fast minimum-norm adversarial attacks through adaptive
        norm constraints", NeurIPS, https://arxiv.org/abs/2102.12827 (Algorithm 1).
        Duchi, Shalev-Shwartz, Singer & Chandra (2008), "Efficient projections onto the l1-ball for
        learning in high dimensions", ICML (the L1 projection).

    Example:
        >>> x_adv = gradkit.fmn(model, x, y, norm=2, steps=100, clip_values=(0, 1))  # doctest: +SKIP
    """
    return fmn_run(
        model, x, y, norm=norm, steps=steps, targeted=targeted, alpha_init=alpha_init,
        alpha_final=alpha_final, gamma_init=gamma_init, gamma_final=gamma_final,
        starting_points=starting_points, binary_search_steps=binary_search_steps, clip_values=clip_values,
        batch_size=batch_size, seed=seed, output=output, **options,
    )[0]  # fmt: skip
