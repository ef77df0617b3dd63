"""`gradkit.apgd`: Auto-PGD with CE or DLR loss, untargeted or targeted (APGD-T), with restarts."""

import numpy as np

from gradkit import _checks
from gradkit.attacks import _apgd_l1 as l1
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._apgd_device import apgd_device
from gradkit.attacks._session import Session

LOSSES = ("ce", "dlr")
_STACKED_VALUES = 1 << 24  # input values of the targets run together in APGD-T (64 MB per float32 array)


def _check_classes(loss, targeted, n_classes):
    needed = 4 if targeted else 3
    if loss == "dlr" and n_classes < needed:
        raise ValueError(
            f"`loss`='dlr' needs at least {needed} classes {'targeted' if targeted else 'untargeted'} (it "
            f"divides by the gap between the 1st and {needed - 1}rd largest logits); the model has "
            f"{n_classes}. Use loss='ce'."
        )


def apgd_run(model, x, y=None, *, eps, norm=np.inf, steps=100, loss="ce", targeted=False, n_restarts=1,
             n_target_classes=9, clip_values=None, batch_size=None, output=None, objective="loss_sum",
             rho=0.75, seed=None, use_largereps=False, eot_iter=1, surrogate=None):  # fmt: skip
    """`gradkit.apgd` returning `(x_adv, success (n,) bool, session)` (the session holds the costs);
    `eot_iter` > 1 averages the gradient over that many draws of the model's randomness per step (EOT),
    `surrogate` takes it through a differentiable stand-in of the model (BPDA): see `AttackGradient`."""
    loss = _checks.check_choice(loss, "loss", LOSSES)
    use_largereps = _checks.check_flag(use_largereps, "use_largereps")
    steps = _checks.check_steps(steps)
    n_restarts = _checks.check_int(n_restarts, "n_restarts", minimum=1)
    n_target_classes = _checks.check_int(n_target_classes, "n_target_classes", minimum=1)
    seed = _checks.check_seed(seed)
    eot_iter = _checks.check_int(eot_iter, "eot_iter", minimum=1)
    session = Session(model, x, y, eps=eps, norm=norm, clip_values=clip_values, batch_size=batch_size,
                      output=output, loss=loss, objective=objective, targeted=targeted, eot_iter=eot_iter,
                      surrogate=surrogate, norms=_checks.GRADIENT_NORMS)  # fmt: skip
    if use_largereps and session.norm != 1:
        raise ValueError(
            f"`use_largereps` is a schedule of the L1 threat model (norm=1). Received: norm={norm!r}"
        )
    _check_classes(loss, session.targeted, session.n_classes)  # before the first forward pass
    x_adv, success = session.x0.copy(), np.zeros(len(session.labels), bool)
    if session.eps == 0:
        return x_adv, session.predict(x_adv) != session.labels, session
    targets = [None]
    if session.targeted:
        ranks = session.top_classes(min(n_target_classes, session.n_classes - 1))  # never the label
        targets = [ranks[:, j] for j in range(ranks.shape[1])]
    rng, tried = np.random.default_rng(seed), np.zeros(len(session.labels), bool)
    for group in _groups(targets, len(session.labels), session.x0[0].size):
        for _ in range(n_restarts):
            todo = np.flatnonzero(~success)
            if not len(todo):
                return geometry.inside(x_adv, session.x0, session.eps, session.norm), success, session
            rows = np.tile(todo, len(group))  # target-major: the rows of target j are rows j*m:(j+1)*m
            adv, hit = _one_run(  # APGD-T succeeds on any misclassification, as in AutoAttack
                session, rows, None if group[0] is None else np.concatenate([t[todo] for t in group]),
                steps=steps, rng=rng, rho=rho, use_largereps=use_largereps,
            )  # fmt: skip
            adv, hit = adv.reshape((len(group), len(todo)) + adv.shape[1:]), hit.reshape(len(group), -1)
            first, broken = hit.argmax(axis=0), hit.any(axis=0)  # the first target that succeeded
            keep = broken | ~tried[todo]  # a point never broken keeps its first run's best iterate
            x_adv[todo[keep]] = adv[first, np.arange(len(todo))][keep]
            success[todo[broken]], tried[todo] = True, True
    return geometry.inside(x_adv, session.x0, session.eps, session.norm), success, session


def _one_run(session, rows, targets, *, steps, rng, rho, use_largereps):
    """One APGD run on the rows `rows` of the session: `(x_adv, success)`; with `use_largereps` the
    three runs at 3, 2 and 1 times eps of `_apgd_l1.stages`, each from the previous one's best point."""
    x0, labels = session.x0[rows], session.labels[rows]
    if not use_largereps:
        return apgd_device(session, x0, labels, targets=targets, steps=steps, rng=rng, rho=rho)[:2]
    start = x0 + rng.standard_normal(size=x0.shape).astype(x0.dtype)
    runs = l1.stages(session.eps, steps)
    for i, (eps, n_steps) in enumerate(runs):
        adv, hit, start = apgd_device(session, x0, labels, targets=targets, steps=n_steps, rng=rng, rho=rho,
                                      eps=eps, x_init=start, freeze=i == len(runs) - 1)  # fmt: skip
    return adv, hit


def _groups(targets, n, features):
    """The targets in groups run together, each group one APGD run over the rows of all its targets
    (independent per row, so the same as one run per target, but with `len(group)` times fewer
    calls). A group holds at most `_STACKED_VALUES / (n * features)` targets (at least one)."""
    size = max(1, _STACKED_VALUES // max(n * features, 1))
    return [targets[i : i + size] for i in range(0, len(targets), size)]


def apgd(model, x, y=None, *, eps, norm=np.inf, steps=100, loss="ce", targeted=False, n_restarts=1,
         n_target_classes=9, clip_values=None, batch_size=None, output=None, objective="loss_sum", rho=0.75,
         seed=None, use_largereps=False):  # fmt: skip
    """Auto-PGD (Croce & Hein 2020): step-size-free PGD with momentum; CE or DLR loss; APGD-T; Linf, L2
    and L1 (APGD-L1, Croce & Hein 2021).

    The step size starts at 2 * eps and is halved at the checkpoints of Algorithm 1 when progress stalls
    (restarting from the best point); momentum 0.75; success is judged at every iterate on the model's
    real decision rule (argmax; an ensemble's or boosted model's weighted hard vote), and each sample
    keeps its first fooling iterate, else its iterate of highest loss. Each restart attacks only the
    points still robust. The whole run uses one compiled objective (`gradkit.gradients.AttackGradient`):
    a row count that changes as points are broken is padded to the batch size, so it traces once (on
    PyTorch, where a trace costs milliseconds, to a multiple of 32 rows).

    Targeted (APGD-T, as in AutoAttack's standard version): for each of the `n_target_classes` most
    likely classes other than the top one (per sample, clean logits), `n_restarts` runs towards it,
    again only on the points still robust; `y` holds the TRUE labels in both modes. The targets run
    together, as one run over their stacked rows (rows are independent: the same as one run per
    target, with fewer calls), up to 2**24 input values at a time; a point keeps the example of the
    first target, in rank order, that fooled it.

    The L1 threat model (`norm=1`) is APGD-L1 of "Mind the box" (AutoAttack's L1 branch):

    | | Linf, L2 | L1 |
    |---|---|---|
    | start | x0 + eps * random unit direction | x0 + N(0, I), projected |
    | direction | sign(g) / unit-L2 g | sparse (1) |
    | step size, momentum | 2 * eps, 0.75 | eps, none |
    | projection | clip / rescale, clip to the box | exact onto L1-ball and box (2) |
    | checkpoints | 22%, 41%, ... (Algorithm 1) | every 4% of the steps (3) |

    (1) sign(g) on the `topk` fraction of largest |g_i|, divided by their count (unit L1 norm).
    (2) The closest point of the L1-ball intersected with the box `clip_values` (Lemma 3.1).
    (3) `topk` = sparsity of the best point / (1.5 d); where the best point got sparser (by 5%), the
    step goes back to eps and the run restarts from it, elsewhere the step is divided by 1.5; the step
    stays in [eps / 10, eps].

    `use_largereps=True` (L1 only; AutoAttack's L1 standard version uses it, with `n_restarts=5` for
    APGD-CE and `n_target_classes=5` for APGD-T) splits each run into runs at 3 * eps, 2 * eps and eps
    over 30%, 30% and 40% of the steps, each started at the previous one's best point.

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a fitted boosting
            estimator. Probability outputs are read through the logits before a final softmax where the
            graph shows one, else as log-probabilities.
        x: float32 `(n, *input_shape)` in the model's input units, inside `clip_values`.
        y: true class ids `(n,)` or one-hot `(n, C)`. Defaults to the model's predictions.
        eps: radius of the threat model, float >= 0 (input units). norm: `np.inf` (or "inf", "linf";
            default), `2` (or "l2") or `1` (or "l1").
        steps: iterations per run, int >= 1. Defaults to 100 (AutoAttack's value).
        loss: "ce" (cross-entropy, default) or "dlr" (Difference of Logits Ratio, eq. 6; targeted:
            eq. 7). DLR needs >= 3 classes (>= 4 targeted): fewer raise ValueError.
        targeted: False (default) or True (APGD-T over the top `n_target_classes` classes).
        n_restarts: runs per target (random starts on the eps-sphere), int >= 1. Defaults to 1.
        n_target_classes: targets tried by APGD-T, int >= 1 (capped at C - 1). Defaults to 9.
        clip_values: None or `(min, max)`, the valid input range.
        batch_size: rows per compiled call. Defaults to None: min(256, next power of two >= n); on
            PyTorch as many rows as hold 2**22 input values (APGD-T runs its targets together).
        output: name or index of the attacked output of a multi-output model.
        objective: how an ensemble's members are combined, as in `gradkit.bim`. Defaults to "loss_sum".
        rho: threshold of the step-size rule (condition 1), in [0, 1]. Defaults to 0.75.
        seed: None or int >= 0 seeding the random starts (numpy).
        use_largereps: the decreasing-eps schedule of APGD-L1 (norm=1 only). Defaults to False.

    Returns:
        float32 `(n, *input_shape)` adversarial examples, in the eps-ball around `x` and in `clip_values`.

    Raises:
        ValueError: eps < 0, a bad norm, loss, steps < 1, use_largereps with a norm other than 1,
            n_restarts < 1, too few classes for DLR, labels out of range, `x` outside `clip_values`;
            before any work.
        TypeError: several inputs (use `gradkit.pgd`), non-integer counts, a bad `model`.

    References:
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (Algorithm 1; DLR eq. 6-7).
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (APGD-L1: sec. 3, Algorithm 1-2; use_largereps: sec. 3.2).

    Example:
        >>> x_adv = gradkit.apgd(model, x, y, eps=8 / 255, loss="dlr", clip_values=(0, 1))  # doctest: +SKIP
    """
    return apgd_run(
        model, x, y, eps=eps, norm=norm, steps=steps, loss=loss, targeted=targeted, n_restarts=n_restarts,
        n_target_classes=n_target_classes, clip_values=clip_values, batch_size=batch_size, output=output,
        objective=objective, rho=rho, seed=seed, use_largereps=use_largereps,
    )[0]  # fmt: skip
