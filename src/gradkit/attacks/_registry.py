"""Attacks by name, with what an evaluation needs to know of each run: per-sample success on the
model's real decision rule, the cost, and signs of attack failure."""

import dataclasses

import numpy as np

from gradkit import _checks
from gradkit.attacks import _geometry as geometry
from gradkit.attacks import _loop
from gradkit.attacks._apgd_attack import apgd_run
from gradkit.attacks._fab import fab_run
from gradkit.attacks._prepare import gradient_for, owner, prepare, step_for
from gradkit.attacks._square_attack import square_run
from gradkit.gradients import WeightedEnsemble, as_ensemble, check_x

NAMES = ("apgd-ce", "apgd-dlr", "apgd-t", "fab", "fab-t", "square", "pgd", "bim", "fgsm")


@dataclasses.dataclass
class AttackResult:
    """One attack run: `x_adv` shaped like x, `success` bool `(n,)`, rows evaluated without (`n_forwards`)
    and with (`n_gradients`) a gradient, `zero_gradient` bool `(n,)` (input gradient exactly zero at the
    clean point) or None, and `from_probabilities` (log-probabilities stood in for logits)."""

    x_adv: np.ndarray
    success: np.ndarray
    n_forwards: int
    n_gradients: int
    zero_gradient: np.ndarray | None
    from_probabilities: bool


def is_ensemble(model):
    """True for a `WeightedEnsemble` of several members or a boosting estimator."""
    return not hasattr(model, "layers") and (
        isinstance(model, WeightedEnsemble) or hasattr(model, "as_ensemble")
    )


def _objective(model, batch_size=None, output=None):
    grad = gradient_for(model, loss="ce", output=output, batch_size=batch_size)
    return step_for(model, grad, loss="ce", objective="loss_sum", targeted=False, output=output,
                    batch_size=batch_size)  # fmt: skip


def decide(model, x, batch_size=None, output=None):
    """The model's real decision `(n,)` int64 on `x`: argmax, or the weighted hard vote of an ensemble."""
    x, n = check_x(as_ensemble(model).models[0], x)
    objective = _objective(owner(model), _checks.check_batch_size(batch_size), output)
    _, logits = objective.forward(x, np.zeros(n, np.int32))
    return objective.decide(logits)


def _zero_gradient(session):
    _, _, grad = session.objective(session.x0, session.labels)
    return ~np.any(grad.reshape(len(grad), -1) != 0, axis=1)


def run_attack(
    name, model, x, y, *, eps, norm=np.inf, clip_values=None, batch_size=None, seed=None, **options
):
    """Runs the attack `name` (one of `NAMES`) and returns an `AttackResult`.

    Options: `steps`, `n_restarts`, `n_target_classes` (APGD, FAB, FAB-T: AutoAttack's 100, 1 and 9 by
    default; the targets are capped at C - 1); `n_queries`, `p_init` (Square); `steps`,
    `eps_step` (PGD, BIM: eps_step defaults to 2.5 * eps / steps); `objective` (ensembles), `output`;
    `eot_iter` (EOT) and `surrogate` (BPDA) for APGD, PGD, BIM and FGSM (see `AttackGradient`).
    """
    _checks.check_choice(name, "attack", NAMES)
    objective = options.pop("objective", "loss_sum")
    if name.startswith("apgd"):
        loss = "ce" if name == "apgd-ce" else "dlr"
        x_adv, success, session = apgd_run(
            model, x, y, eps=eps, norm=norm, loss=loss, targeted=name == "apgd-t", clip_values=clip_values,
            batch_size=batch_size, seed=seed, objective=objective, **options,
        )  # fmt: skip
        zero = _zero_gradient(session) if name == "apgd-ce" else None
        return AttackResult(x_adv, success, session.n_forwards, session.n_gradients, zero,
                            any(session.objective.from_probabilities))  # fmt: skip
    if name.startswith("fab"):
        return _fab(name, model, x, y, eps, norm, clip_values, batch_size, seed, objective, options)
    if name == "square":
        x_adv, success, session = square_run(
            model,
            x,
            y,
            eps=eps,
            norm=norm,
            clip_values=clip_values,
            batch_size=batch_size,
            seed=seed,
            objective=objective,
            **options,
        )
        return AttackResult(
            x_adv, success, session.n_forwards, 0, None, any(session.objective.from_probabilities)
        )
    return _classic(name, model, x, y, eps, norm, clip_values, batch_size, seed, objective, options)


def _fab(name, model, x, y, eps, norm, clip_values, batch_size, seed, objective, options):
    """FAB, eps-bounded, with AutoAttack's settings: "fab-t" targeted (100 steps, 1 restart, the top 9
    targets, capped at C - 1 by `fab`), "fab" untargeted (100 steps, 1 restart; the "plus" version: 5)."""
    settings = dict(steps=100, n_restarts=1, n_target_classes=9) | options
    x_adv, _, success, session = fab_run(
        model, x, y, norm=norm, eps=eps, targeted=name == "fab-t", clip_values=clip_values,
        batch_size=batch_size, seed=seed, objective=objective, **settings,
    )  # fmt: skip
    return AttackResult(x_adv, success, session.n_forwards, session.n_gradients, None,
                        any(session.objective.from_probabilities))  # fmt: skip


def _classic(name, model, x, y, eps, norm, clip_values, batch_size, seed, objective, options):
    steps = 1 if name == "fgsm" else _checks.check_steps(options.pop("steps", 10))
    eps_step = options.pop("eps_step", None) or geometry.default_eps_step(eps, steps)
    keep = "last" if name == "fgsm" else "first_success"
    output = options.pop("output", None)
    gradient = dict(eot_iter=options.pop("eot_iter", 1), surrogate=options.pop("surrogate", None))
    x_adv = _loop.run(
        model, x, y, eps=eps, eps_step=_loop.SINGLE_STEP if name == "fgsm" else eps_step, steps=steps,
        norm=norm, clip_values=clip_values, targeted=False, loss=None, batch_size=batch_size,
        output=output, random_start=name == "pgd", seed=seed, objective=objective, keep=keep, **gradient,
    )  # fmt: skip
    # the loop reads each member's output as the APGD objectives do (logits, or log-probabilities)
    step = _objective(owner(model), _checks.check_batch_size(batch_size), output)
    probabilities = step is not None and any(step.from_probabilities)
    labels = decide(model, x, batch_size, output) if y is None else None
    truth = labels if labels is not None else _labels(model, x, y, output)
    success = decide(model, x_adv, batch_size, output) != truth
    n = len(success)
    return AttackResult(x_adv, success, n, n * steps, None, probabilities)


def _labels(model, x, y, output=None):
    _, labels, _ = prepare(gradient_for(model, output=output), x, y, None)
    return labels
