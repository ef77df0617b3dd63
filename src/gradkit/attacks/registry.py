"""The attacks by name: one declarative table that `gradkit.evaluate`, `min_norm`, the robustness curve and
the study read, and `run_attack`, which runs a row of it and reports what an evaluation needs (per-sample
success on the model's real decision rule, the cost, signs of attack failure).

| name     | function | kind            | norms            | what the name fixes       | classes |
|----------|----------|-----------------|------------------|---------------------------|---------|
| apgd-ce  | `apgd`   | eps             | Linf, L2, L1     | loss="ce"                 |         |
| apgd-dlr | `apgd`   | eps             | Linf, L2, L1     | loss="dlr"                | >= 3    |
| apgd-t   | `apgd`   | eps             | Linf, L2, L1     | loss="dlr", targeted=True | >= 4    |
| fmn      | `fmn`    | min-norm        | L0, L1, L2, Linf |                           |         |
| ddn      | `ddn`    | min-norm        | L2               |                           |         |
| fab      | `fab`    | eps or min-norm | Linf, L2, L1     | 100 steps, 1 restart      |         |
| fab-t    | `fab`    | eps             | Linf, L2, L1     | targeted=True, 9 targets  | >= 3    |
| square   | `square` | eps, scores     | Linf, L2, L1     |                           |         |
| pgd      | `pgd`    | eps             | Linf, L2, L1     | random start, 10 steps    |         |
| bim      | `bim`    | eps             | Linf, L2, L1     | 10 steps                  |         |
| fgsm     | `fgsm`   | eps             | Linf, L2, L1     | one step                  |         |
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from gradkit import _checks
from gradkit.attacks._frame import gradient_for, owner, prepare, recording, step_for
from gradkit.attacks.apgd import apgd
from gradkit.attacks.ddn import ddn
from gradkit.attacks.fab import fab
from gradkit.attacks.fmn import fmn
from gradkit.attacks.geometry import default_eps_step
from gradkit.attacks.pgd import SINGLE_STEP, bim, fgsm, pgd, projected_loop
from gradkit.attacks.square import square
from gradkit.gradients import WeightedEnsemble, as_ensemble, check_x

_NORMS = (np.inf, 2.0, 1.0)


@dataclasses.dataclass(frozen=True)
class Attack:
    """One row of the table.

    Attributes:
        name: the name `run_attack`, `evaluate(attacks=...)` and the study use.
        function: the public attack function.
        budget: runs at a given eps (`run_attack`, `evaluate`); min_norm: returns each sample's smallest
            adversarial example without eps (`gradkit.min_norm`).
        norms: the norms it takes (np.inf, 2.0, 1.0, 0.0).
        options: what the name fixes, `(option, value)` pairs passed to `function`.
        gradients: uses input gradients (else forward passes only: the check against masking).
        budget_option: the option `evaluate`'s budget sets: "steps", "n_queries" or None (one step).
        eot: takes `eot_iter` and `surrogate` (EOT, BPDA).
        ascent: an iterative ascent of a loss in the eps-ball (APGD, PGD, BIM), the attacks a late
            success of Square or FGSM is judged against (`evaluate`'s flags).
        min_classes: the fewest classes it needs (the DLR loss divides by gaps of sorted logits; FAB-T
            targets a class other than the two most likely).
    """

    name: str
    function: Callable
    budget: bool = True
    min_norm: bool = False
    norms: tuple = _NORMS
    options: tuple = ()
    gradients: bool = True
    budget_option: str | None = "steps"
    eot: bool = False
    ascent: bool = False
    min_classes: int = 0


_FAB = (("n_restarts", 1), ("n_target_classes", 9), ("steps", 100))
TABLE = {
    a.name: a
    for a in (
        Attack("apgd-ce", apgd, options=(("loss", "ce"),), eot=True, ascent=True),
        Attack("apgd-dlr", apgd, options=(("loss", "dlr"),), eot=True, ascent=True, min_classes=3),
        Attack(
            "apgd-t",
            apgd,
            options=(("loss", "dlr"), ("targeted", True)),
            eot=True,
            ascent=True,
            min_classes=4,
        ),
        Attack("fmn", fmn, budget=False, min_norm=True, norms=(0.0, 1.0, 2.0, np.inf)),
        Attack("ddn", ddn, budget=False, min_norm=True, norms=(2.0,)),
        Attack("fab", fab, min_norm=True, options=_FAB),
        Attack("fab-t", fab, options=(*_FAB, ("targeted", True)), min_classes=3),
        Attack("square", square, gradients=False, budget_option="n_queries"),
        Attack("pgd", pgd, eot=True, ascent=True),
        Attack("bim", bim, eot=True, ascent=True),
        Attack("fgsm", fgsm, budget_option=None, eot=True),
    )
}
NAMES = tuple(name for name, a in TABLE.items() if a.budget)  # the attacks `run_attack` runs at an eps
MIN_NORM_NAMES = tuple(name for name, a in TABLE.items() if a.min_norm)


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


def _ce_objective(model, batch_size=None, output=None):
    grad = gradient_for(model, loss="ce", output=output, batch_size=batch_size)
    return step_for(
        model, grad, loss="ce", objective="loss_sum", targeted=False, output=output, batch_size=batch_size
    )


def decide(model, x, batch_size=None, output=None):
    """The model's real decision `(n,)` int64 on `x`: argmax, or the weighted hard vote of an ensemble."""
    x, n = check_x(as_ensemble(model).models[0], x)
    objective = _ce_objective(owner(model), _checks.check_batch_size(batch_size), output)
    _, logits = objective.forward(x, np.zeros(n, np.int32))
    return objective.decide(logits)


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
    attack = TABLE[name]
    options = dict(attack.options, objective=options.pop("objective", "loss_sum")) | options
    common = dict(eps=eps, norm=norm, clip_values=clip_values, batch_size=batch_size, seed=seed)
    if attack.function in (fgsm, bim, pgd):
        return _projected(name, model, x, y, common, options)
    with recording() as record:
        x_adv = attack.function(model, x, y, **common, **options)
    zero = _zero_gradient(record.frame) if name == "apgd-ce" else None
    return AttackResult(
        x_adv, record.success, record.n_forwards, record.n_gradients, zero, record.from_probabilities
    )


def _zero_gradient(frame):
    _, _, grad = frame.objective(frame.x0, frame.labels)
    return ~np.any(grad.reshape(len(grad), -1) != 0, axis=1)


def _projected(name, model, x, y, common, options):
    """FGSM, BIM and PGD through their loop (`pgd.projected_loop`), success judged by `decide`."""
    steps = 1 if name == "fgsm" else _checks.check_steps(options.pop("steps", 10))
    eps, batch_size, output = common["eps"], common["batch_size"], options.pop("output", None)
    eps_step = options.pop("eps_step", None) or default_eps_step(eps, steps)
    keep = "last" if name == "fgsm" else "first_success"
    gradient = dict(eot_iter=options.pop("eot_iter", 1), surrogate=options.pop("surrogate", None))
    x_adv = projected_loop(
        model,
        x,
        y,
        eps=eps,
        eps_step=SINGLE_STEP if name == "fgsm" else eps_step,
        steps=steps,
        norm=common["norm"],
        clip_values=common["clip_values"],
        targeted=False,
        loss=None,
        batch_size=batch_size,
        output=output,
        random_start=name == "pgd",
        seed=common["seed"],
        objective=options["objective"],
        keep=keep,
        mask=options.pop("mask", None),
        **gradient,
    )
    # the loop reads each member's output as the APGD objectives do (logits, or log-probabilities)
    step = _ce_objective(owner(model), _checks.check_batch_size(batch_size), output)
    probabilities = step is not None and any(step.from_probabilities)
    labels = decide(model, x, batch_size, output) if y is None else None
    truth = labels if labels is not None else _labels(model, x, y, output)
    success = decide(model, x_adv, batch_size, output) != truth
    n = len(success)
    return AttackResult(x_adv, success, n, n * steps, None, probabilities)


def _labels(model, x, y, output=None):
    _, labels, _ = prepare(gradient_for(model, output=output), x, y, None)
    return labels
