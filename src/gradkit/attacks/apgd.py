"""Auto-PGD (Croce & Hein 2020, Algorithm 1): step-size-free PGD with momentum, CE or DLR loss,
untargeted or targeted (APGD-T), Linf and L2; and APGD-L1 (Croce & Hein 2021), its sparse L1 version.

Algorithm (Linf, L2). Start at `x_0` on the eps-sphere around the clean `x0` (AutoAttack's start:
`x0 + eps * t / ||t||`, t uniform in [-1, 1]^d for Linf, gaussian for L2). Step size `eta = 2 eps`,
momentum `alpha = 0.75`, `P` the projection onto the eps-ball and the box, `dir` the sign (Linf) or
the unit-L2 direction (L2):

    z_{k+1} = P(x_k + eta_k dir(g_k))
    x_{k+1} = P(x_k + alpha (z_{k+1} - x_k) + (1 - alpha) (x_k - x_{k-1}))       (alpha = 1 at k = 0)

At each checkpoint `w_j = ceil(p_j * steps)`, `p_0 = 0`, `p_1 = 0.22`, `p_{j+1} = p_j + max(p_j -
p_{j-1} - 0.03, 0.06)`, a sample halves its step size and restarts from its best point (with that
point's gradient) when condition 1 (fewer than `rho (w_j - w_{j-1})` increases of the objective since
the last checkpoint, `rho = 0.75`) or condition 2 (step size not halved at the last checkpoint and best
objective not improved since) holds; condition 2 cannot fire at the first checkpoint (as in AutoAttack).
Checkpoints follow the paper's ceil (AutoAttack's code floors; equal for 100 steps) and condition 1
its strict `<` (AutoAttack's code halves at `<=`). A per-feature Linf budget (an array `eps`) scales
the start, the ball and the step per feature: `eta_k = c_k eps`, `c` a per-sample factor from 2, halved.

APGD-L1 (Croce & Hein 2021, Algorithm 1): start at `x0 + N(0, I)` projected; no momentum; step size
`eta = eps`; `x_{k+1} = P(x_k + eta s(g_k, topk))`, `s` the sign of g on its largest `topk * d`
coordinates over their count (unit L1 norm), `P` the exact projection onto the L1-ball and the box.
Checkpoints every `max(floor(0.04 steps), 1)` iterations: where the best point's sparsity `sp =
||x_best - x0||_0` fell below 0.95 times its value at the previous checkpoint, `eta` goes back to eps
and the sample restarts from its best point; elsewhere `eta` is divided by 1.5; it stays in [eps / 10,
eps]; then `topk = sp / (1.5 d)` (starts at 0.2). `use_largereps` (AutoAttack's L1 standard version)
splits a run into runs at 3, 2 and 1 times eps over 30%, 30% and 40% of the steps, each from the
previous run's best point.

Success is judged at every iterate on the model's real decision rule; a sample keeps its first fooling
iterate, else its iterate of highest objective. APGD-T's targets (by logit, or MALT's linearized
distance) come from `_targets`. The state of a batch stays on the device (`_engine`): one compiled
step evaluates the objective, records, applies the checkpoint rule where the step is a checkpoint and
proposes the next iterate; the host reads one flag per checkpoint. Succeeded rows are frozen (a mask),
and the step counts the rows it really attacked.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (Algorithm 1; DLR eq. 6-7;
    reference code: fra31/auto-attack, `autoattack/autopgd_base.py`).
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (sec. 3, Algorithm 1; sec. 3.2, the schedule of eps).
    Athalye, Engstrom, Ilyas & Kwok (2018), "Synthesizing robust adversarial examples", ICML,
    https://arxiv.org/abs/1707.07397 (EOT).
    Melamed, Yehudai & Shamir (2024), "MALT Powers Up Adversarial Attacks", NeurIPS,
    https://arxiv.org/abs/2407.02240 (the targets of `target_selection="malt"`).
"""

import math

import numpy as np
from keras import ops

from gradkit import _checks, backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import _targets, geometry
from gradkit.attacks._frame import Frame, broadcast_eps, check_eps, step_function

LOSSES = ("ce", "dlr")
STACKED_VALUES = 1 << 24  # input values of the targets run together in APGD-T (64 MB per float32 array)
REDUCE_STEP = 1.5  # L1: the step size is divided by it at a checkpoint without a sparser best point
MIN_STEP = 10.0  # ... down to eps / MIN_STEP
SPARSER = 0.95  # a best point sparser than SPARSER times the last one resets the step size


def apgd(
    model,
    x,
    y=None,
    *,
    eps,
    norm=np.inf,
    steps=100,
    loss="ce",
    targeted=False,
    n_restarts=1,
    n_target_classes=9,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    batch_size=None,
    output=None,
    objective="loss_sum",
    rho=0.75,
    seed=None,
    use_largereps=False,
    eot_iter=1,
    surrogate=None,
    target_selection="logits",
    preprocessing=None,
):
    """Auto-PGD (Croce & Hein 2020): step-size-free PGD with momentum; CE or DLR loss; APGD-T; Linf, L2
    and L1 (APGD-L1, Croce & Hein 2021). The algorithm is in `gradkit.attacks.apgd`'s module docstring.

    Each restart attacks only the points still robust. The whole run uses one compiled objective: a row
    count that changes as points are broken is padded to the batch size, so it traces once.

    Targeted (APGD-T, as in AutoAttack's standard version): for each of the `n_target_classes` classes
    ranked first (never the label; by clean logit, or MALT: `target_selection`), `n_restarts` runs
    towards it, again only on the points still robust; `y` holds the TRUE labels in both modes and any
    misclassification counts. The targets run together, as one run over their stacked rows (rows are
    independent), up to 2**24 input values at a time; a point keeps the example of the first target,
    in rank order, that fooled it.

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a fitted boosting
            estimator. Probability outputs are read through the logits before a final softmax where the
            graph shows one, else as log-probabilities.
        x: float32 `(n, *input_shape)` in the model's input units, inside `clip_values`.
        y: true class ids `(n,)` or one-hot `(n, C)`. Defaults to the model's predictions.
        eps: radius of the threat model, float >= 0 (input units); for Linf also a per-feature budget,
            an array >= 0 broadcastable to one input's shape (the start, steps and projection scale
            per feature; ValueError with another norm).
        norm: `np.inf` (or "inf", "linf"; default), `2` (or "l2") or `1` (or "l1").
        steps: iterations per run, int >= 1. Defaults to 100 (AutoAttack's value).
        loss: "ce" (cross-entropy, default) or "dlr" (Difference of Logits Ratio, eq. 6; targeted:
            eq. 7). DLR needs >= 3 classes (>= 4 targeted): fewer raise ValueError.
        targeted: False (default) or True (APGD-T over the top `n_target_classes` classes).
        n_restarts: runs per target (random starts on the eps-sphere), int >= 1. Defaults to 1.
        n_target_classes: targets tried by APGD-T, int >= 1 (capped at C - 1). Defaults to 9.
        clip_values: None or `(min, max)`, the valid input range; or per-feature `(lo, hi)` arrays.
        mask, attack_inputs: as in `gradkit.fgsm` (`x` a list or dict of arrays for a model of several
            inputs, attacked as one flat row; eps is one number or an array over that row).
        batch_size: rows per compiled call. Defaults to None: min(256, next power of two >= n); where a
            new row count costs little (`backend.ROW_QUANTUM`), as many rows as hold 2**22 input values.
        output: name or index of the attacked output of a multi-output model.
        objective: how an ensemble's members are combined, as in `gradkit.bim`. Defaults to "loss_sum".
        rho: threshold of the step-size rule (condition 1), in [0, 1]. Defaults to 0.75.
        seed: None or int >= 0 seeding the random starts (numpy).
        use_largereps: the decreasing-eps schedule of APGD-L1 (norm=1 only). Defaults to False.
        eot_iter: forward passes averaged per step (EOT, a randomized model), int >= 1. Defaults to 1.
            With EOT every row runs all its steps and returns its point of highest expected loss where
            that point's own draw fooled the model, else its first success.
        surrogate: None, or a differentiable stand-in the gradient is taken through (BPDA; see
            `gradkit.gradients.AttackGradient`).
        target_selection: how APGD-T ranks its targets (targeted=True only): "logits" (default,
            AutoAttack's: the most likely classes) or "malt" (Melamed et al. 2024: the nearest
            linearized boundaries `(z_y - z_j) / ||grad z_y - grad z_j||_q` at `x`, q the dual norm,
            among the 100 most likely classes; one gradient per class and point, see `_targets`).
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        float32 `(n, *input_shape)` adversarial examples, in the eps-ball around `x` and in `clip_values`.

    Raises:
        ValueError: eps < 0 (an array: also with L2/L1 or not broadcastable to one input), a bad norm,
            loss, steps < 1, use_largereps with a norm other than 1,
            n_restarts < 1, too few classes for DLR, labels out of range, `x` outside `clip_values`,
            an unknown `target_selection` or "malt" untargeted; before any work.
        TypeError: several inputs of an ensemble, or one array for a model of several inputs, non-integer
            counts, a bad `model`.

    References:
        Croce & Hein (2020), https://arxiv.org/abs/2003.01690 (Algorithm 1; DLR eq. 6-7).
        Croce & Hein (2021), https://arxiv.org/abs/2103.01208 (APGD-L1; use_largereps: sec. 3.2).
        Melamed, Yehudai & Shamir (2024), https://arxiv.org/abs/2407.02240 (MALT, Algorithm 1).

    Example:
        >>> x_adv = gradkit.apgd(model, x, y, eps=8 / 255, loss="dlr", clip_values=(0, 1))  # doctest: +SKIP
    """
    loss = _checks.check_choice(loss, "loss", LOSSES)
    use_largereps = _checks.check_flag(use_largereps, "use_largereps")
    steps = _checks.check_steps(steps)
    n_restarts = _checks.check_int(n_restarts, "n_restarts", minimum=1)
    n_target_classes = _checks.check_int(n_target_classes, "n_target_classes", minimum=1)
    seed = _checks.check_seed(seed)
    eot_iter = _checks.check_int(eot_iter, "eot_iter", minimum=1)
    target_selection = _targets.check_selection(target_selection, targeted)
    given_norm, eps = norm, _checks.check_eps(eps) if np.ndim(eps) == 0 else eps
    norm = _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    eps = check_eps(eps, norm)  # an array: a per-feature budget (Linf)
    frame = Frame(
        model,
        x,
        y,
        loss=loss,
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        batch_size=batch_size,
        output=output,
        objective=objective,
        targeted=targeted,
        eot_iter=eot_iter,
        surrogate=surrogate,
        single_input="APGD",
        preprocessing=preprocessing,
    )
    if use_largereps and norm != 1:
        raise ValueError(
            f"`use_largereps` is a schedule of the L1 threat model (norm=1). Received: norm={given_norm!r}"
        )
    _check_classes(loss, frame.targeted, frame.n_classes)  # before the first forward pass
    x_adv, success, eps = frame.x0.copy(), np.zeros(frame.n, bool), broadcast_eps(eps, frame.x0)
    if not np.any(eps):
        frame.success = frame.predict(x_adv) != frame.labels
        return frame.finish(x_adv)
    targets = [None]
    if frame.targeted:  # never the label
        targets = _targets.ranked(frame, n_target_classes, target_selection, norm)
    settings = dict(
        eps=eps, norm=norm, steps=steps, rng=np.random.default_rng(seed), rho=rho, use_largereps=use_largereps
    )
    tried = np.zeros(frame.n, bool)  # the points some run has attacked
    for group in _groups(targets, frame.n, frame.x0[0].size):
        _restarts(frame, group, n_restarts, (x_adv, success, tried), settings)
    frame.success = success
    return frame.finish(geometry.inside(x_adv, frame.x0, eps, norm))


def _restarts(frame, group, n_restarts, results, settings):
    """`n_restarts` runs of the targets `group` (their rows stacked) on the points not yet broken,
    written into `results = (x_adv, success, tried)`: a point keeps the example of the first target, in
    rank order, that fooled it (any misclassification counts), else its first run's best iterate."""
    x_adv, success, tried = results
    for _ in range(n_restarts):
        todo = np.flatnonzero(~success)
        if not len(todo):
            return
        rows = np.tile(todo, len(group))  # target-major: the rows of target j are rows j*m:(j+1)*m
        group_targets = None if group[0] is None else np.concatenate([t[todo] for t in group])
        adv, hit = _one_run(frame, rows, group_targets, **settings)
        adv, hit = adv.reshape((len(group), len(todo)) + adv.shape[1:]), hit.reshape(len(group), -1)
        first, broken = hit.argmax(axis=0), hit.any(axis=0)  # the first target that succeeded
        keep = broken | ~tried[todo]  # a point never broken keeps its first run's best iterate
        x_adv[todo[keep]] = adv[first, np.arange(len(todo))][keep]
        success[todo[broken]], tried[todo] = True, True


def _check_classes(loss, targeted, n_classes):
    needed = 4 if targeted else 3
    if loss == "dlr" and n_classes < needed:
        raise ValueError(
            f"`loss`='dlr' needs at least {needed} classes {'targeted' if targeted else 'untargeted'} (it "
            f"divides by the gap between the 1st and {needed - 1}rd largest logits); the model has "
            f"{n_classes}. Use loss='ce'."
        )


def _groups(targets, n, features):
    """The targets in groups run together, each group one APGD run over the rows of all its targets
    (independent per row, so the same as one run per target, with `len(group)` times fewer calls). A
    group holds at most `STACKED_VALUES / (n * features)` targets (at least one)."""
    size = max(1, STACKED_VALUES // max(n * features, 1))
    return [targets[i : i + size] for i in range(0, len(targets), size)]


def _one_run(frame, rows, targets, *, eps, norm, steps, rng, rho, use_largereps):
    """One APGD run on the rows `rows` of the frame: `(x_adv, success)`; with `use_largereps` the three
    runs of `stages`, each from the previous one's best point."""
    x0, labels = frame.x0[rows], frame.labels[rows]
    if not use_largereps:
        return run(frame, x0, labels, targets, eps=eps, norm=norm, steps=steps, rng=rng, rho=rho)[:2]
    start = x0 + rng.standard_normal(size=x0.shape).astype(x0.dtype)
    runs = stages(eps, steps)
    for i, (stage_eps, n_steps) in enumerate(runs):
        adv, hit, start = run(
            frame,
            x0,
            labels,
            targets,
            eps=stage_eps,
            norm=norm,
            steps=n_steps,
            rng=rng,
            rho=rho,
            x_init=start,
            freeze=i == len(runs) - 1,
        )
    return adv, hit


def run(frame, x0, labels, targets, *, eps, norm, steps, rng, rho, momentum=0.75, x_init=None, freeze=True):
    """One APGD run on the rows `x0` `(m, ...)` with `labels` (and `targets`, APGD-T, or None): `(x_adv,
    success, x_best)`; success means misclassification; `x_best` is each row's point of highest
    objective. The start is `x_init` (projected onto the ball and box) or `sphere_start`; `freeze=False`
    keeps attacking rows that succeeded (the runs of `use_largereps` before the last, as in AutoAttack).
    The evaluated rows are added to `frame.n_gradients`."""
    clip = frame.clip_values
    start = sphere_start(x0, eps, norm, np.random.default_rng(rng)) if x_init is None else x_init
    start = geometry.project_and_clip(np.asarray(start, np.float32), x0, eps, norm, clip, frame.mask)
    objective = frame.objective
    expectation = objective.eot_iter > 1
    static = dict(norm=norm, clip=clip is not None, expectation=expectation)
    step = step_function(objective, "apgd", update(objective, **static), frame.mask, **static)
    plain = step  # a step that is no checkpoint; where steps run eagerly, leave the rule out of it
    if backend.STEPS_RUN_EAGERLY:
        plain = step_function(
            objective,
            "apgd",
            update(objective, **static, checkpoint=False),
            frame.mask,
            **static,
            checkpoint=False,
        )
    lo, hi = clip or (0.0, 0.0)
    scalars = dict(eps=eps, lo=lo, hi=hi, rho=rho, momentum=momentum, freeze=float(freeze))
    constants = {k: engine.scalar(v) for k, v in scalars.items()} | frame.tensors()
    (trainables, non_trainables), parts = objective.fixed(labels, targets)
    init = _init(objective, start, x0, len(labels), eps, norm, x_init is not None)
    results = []
    for first, stop, pad, y, weights in parts:
        state, constant = init(first, stop, pad)
        fixed = dict(constants, y=y, weights=weights, **constant)
        state = _advance((plain, step), (trainables, non_trainables), state, fixed, schedule(steps, norm))
        results.append(engine.to_host(_result(state, expectation), stop - first))
        frame.n_gradients += int(backend.to_numpy(state["n_evaluated"]))
    return tuple(np.concatenate(part) for part in zip(*results))


def _result(state, expectation):
    """`(x_adv, success, x_best)` of a batch: the first success, else the best point; with EOT the best
    point where its own draw fooled the model, else the first success (a reported success is always
    the returned point's)."""
    success, final = state["success"], state["adv"]
    if expectation:
        final = ops.where(engine.rows_mask(state["best_hit"], state["best_x"]), state["best_x"], final)
    final = ops.where(engine.rows_mask(success, final), final, state["best_x"])
    return final, success, state["best_x"]


def update(objective, norm, clip, expectation=False, checkpoint=True):
    """The step's update `update(state, (values, logits), grad, fixed) -> state`: record the iterate,
    count the increases, apply the checkpoint rule (`checkpoint=False`: a step that is no checkpoint,
    where the rule is the identity) and propose the next iterate. With `expectation` (EOT) a row goes on
    after its first success, towards the highest expected loss. The gradient goes into the state for the
    rule and the proposal only."""

    def step(state, aux, grad, fixed):
        values, logits = aux
        valid = fixed["weights"]["rows"] > 0
        active = ops.logical_and(state["active"], valid)
        hit = objective.decide_tensor(logits, fixed["weights"]["alpha"]) != fixed["y"][0]  # any misclass.
        start = state["k"] < 0  # the evaluation of the start point
        state = _record(state, values, hit, grad, active, norm)
        increased = ops.logical_and(ops.logical_and(values > state["values"], active), ops.logical_not(start))
        state["n_increases"] = state["n_increases"] + ops.cast(increased, "int32")
        state["values"] = ops.where(active, values, state["values"])
        state["grad"] = grad
        state["best_at_check"] = ops.where(start, state["best_values"], state["best_at_check"])
        state["n_evaluated"] = state["n_evaluated"] + ops.sum(ops.cast(active, "int32"))
        state["k"] = state["k"] + 1
        if checkpoint:
            state = (_l1_checkpoint if norm == 1 else _checkpoint)(state, fixed, active)
        done = ops.logical_and(state["success"], fixed["freeze"] > 0)  # freeze=0: no early stop
        still = active if expectation else ops.logical_and(active, ops.logical_not(done))
        bounds = (fixed["lo"], fixed["hi"]) if clip else None
        propose = _l1_propose if norm == 1 else _propose
        state = propose(state, fixed, norm, bounds, still)
        state["active"] = still
        del state["grad"]
        return state

    return step


def _kept(grad, norm):
    """The best point's gradient as the state keeps it: for Linf only its sign matters (the step is
    `eta * sign(g)`), kept as int8, a quarter of the bytes; else the gradient."""
    return ops.cast(ops.sign(grad), "int8") if norm == np.inf else grad


def _record(state, values, hit, grad, active, norm):
    """First successes and best points of the rows `active` evaluated at `state["x"]`."""
    new = dict(state)
    first = ops.logical_and(ops.logical_and(hit, ops.logical_not(state["success"])), active)
    new["adv"] = engine.select_rows(first, state["x"], state["adv"])
    new["success"] = ops.logical_or(state["success"], first)
    better = ops.logical_and(values > state["best_values"], active)
    new["best_x"] = engine.select_rows(better, state["x"], state["best_x"])
    new["best_grad"] = engine.select_rows(better, _kept(grad, norm), state["best_grad"])
    new["best_values"] = ops.where(better, values, state["best_values"])
    new["best_hit"] = ops.where(better, hit, state["best_hit"])  # the best point's own decision (EOT)
    return new


def _checkpoint(state, fixed, active):
    """The step-size rule (conditions 1 and 2) on the rows `active`, where this step is a checkpoint."""
    k = state["k"]
    mark = ops.logical_and(state["mark"], active)
    length = ops.cast(k - state["last_mark"], "float32")
    cond1 = ops.cast(state["n_increases"], "float32") < fixed["rho"] * length
    cond2 = ops.logical_and(ops.logical_not(state["reduced"]), state["best_at_check"] >= state["best_values"])
    halve = ops.logical_and(mark, ops.logical_or(cond1, cond2))
    new = dict(state)
    new["eta"] = ops.where(halve, state["eta"] / 2.0, state["eta"])
    new["x"] = engine.select_rows(halve, state["best_x"], state["x"])
    new["grad"] = engine.select_rows(halve, ops.cast(state["best_grad"], state["grad"].dtype), state["grad"])
    new["reduced"] = ops.where(mark, ops.logical_or(cond1, cond2), state["reduced"])
    new["best_at_check"] = ops.where(mark, state["best_values"], state["best_at_check"])
    new["n_increases"] = ops.where(mark, ops.zeros_like(state["n_increases"]), state["n_increases"])
    new["last_mark"] = ops.where(state["mark"], k, state["last_mark"])
    return new


def _propose(state, fixed, norm, bounds, active):
    """`x_{k+1}` on the rows `active`: the projected step of size eta along dir(g), the momentum mix."""
    x, eps, eta = state["x"], fixed["eps"], state["eta"]
    a = ops.cast(ops.where(state["k"] == 0, 1.0, fixed["momentum"]), x.dtype)
    per_feature = len(eps.shape) > 0  # Linf: eta is a factor of the eps array, `(n, ...)` here
    if per_feature:
        eta = engine.rows_mask(eta, x) * ops.cast(eps, "float32")
    args = (x, state["x_prev"], fixed["x0"], state["grad"], eta, a, eps, bounds, active)
    if norm == np.inf and not per_feature:
        x_next, x_prev = engine.fast_path("apgd_linf_step", _linf_momentum_step)(*args)
    elif norm == np.inf:
        x_next, x_prev = _linf_momentum_step(*args)
    else:
        x_next, x_prev = momentum_step(*args, norm=norm)
    return dict(state, x=x_next, x_prev=x_prev)


def momentum_step(x, x_prev, x0, g, eta, a, eps, bounds, active, norm):
    """`(x_next, x)`: `z = P(x + eta dir(g))`, `x_next = P(x + a (z - x) + (1 - a)(x - x_prev))` on the
    rows `active` (the others keep `x`); `x` is the next previous iterate (a row that stops moving never
    reads it again). `eta` `(n,)`, or `(n, ...)` per feature (Linf); `a` a scalar tensor; `eps` a
    scalar tensor, or Linf a per-feature one `(1, ...)`; `bounds` None or `(lo, hi)`."""
    eta = ops.cast(engine.rows_mask(eta, x) if len(eta.shape) == 1 else eta, x.dtype)
    z = geometry.project_and_clip_tensor(x + eta * geometry.direction_tensor(g, norm), x0, eps, norm, bounds)
    mixed = x + a * (z - x) + (1 - a) * (x - x_prev)
    moved = geometry.project_and_clip_tensor(mixed, x0, eps, norm, bounds)
    return engine.select_rows(active, moved, x), x


def _linf_momentum_step(x, x_prev, x0, g, eta, a, eps, bounds, active):
    """`momentum_step` for Linf (what `backend.apgd_linf_step` computes in place)."""
    return momentum_step(x, x_prev, x0, g, eta, a, eps, bounds, active, np.inf)


def _l1_checkpoint(state, fixed, active):
    """APGD-L1's rule on the rows `active`, where this step is a checkpoint: a sparser best point resets
    the step size and restarts from it, else the step size shrinks; `topk` follows the sparsity."""
    mark = ops.logical_and(state["mark"], active)
    x0 = fixed["x0"]
    sp = geometry.row_norm(state["best_x"] - x0, 0)
    sparser = ops.logical_and(mark, sp < SPARSER * state["sp_old"])
    eps = ops.cast(fixed["eps"], "float32")
    eta = ops.clip(ops.where(sparser, eps, state["eta"] / REDUCE_STEP), eps / MIN_STEP, eps)
    new = dict(state)
    new["eta"] = ops.where(mark, eta, state["eta"])
    new["topk"] = ops.where(mark, sp / math.prod(x0.shape[1:]) / REDUCE_STEP, state["topk"])
    new["sp_old"] = ops.where(mark, sp, state["sp_old"])
    new["x"], new["grad"] = engine.select_rows(
        sparser, (state["best_x"], state["best_grad"]), (state["x"], state["grad"])
    )
    return new


def _l1_propose(state, fixed, norm, bounds, active):
    """APGD-L1's `x_{k+1}` on the rows `active`: a sparse step of size eta, projected onto the ball and
    the box (no momentum: the L1 state has no previous iterate)."""
    x = state["x"]
    eta = ops.cast(engine.rows_mask(state["eta"], x), x.dtype)
    moved = geometry.l1_tensor(
        x + eta * sparse_direction(state["grad"], state["topk"]), fixed["x0"], fixed["eps"], bounds
    )
    return dict(state, x=engine.select_rows(active, moved, x))


def sparse_direction(grad, topk):
    """APGD-L1's step direction: `sign(g)` on the coordinates whose `|g|` is at least the
    `floor((1 - topk) * d)`-th smallest (the top `topk` fraction, ties included), divided by their
    count, so that the direction has unit L1 norm.

    Args:
        grad: float tensor `(n, ...)`, the gradient of the objective.
        topk: float tensor `(n,)`, the fraction of coordinates to move per sample, in [0, 1].

    Returns:
        A tensor like `grad`.
    """
    g = geometry.flat(grad)
    d = g.shape[1]
    index = ops.cast(ops.clip((1.0 - ops.cast(topk, g.dtype)) * d, 0, d - 1), "int32")[:, None]
    threshold = ops.take_along_axis(ops.sort(ops.abs(g), axis=1), index, axis=1)
    signs = ops.sign(g) * ops.cast(ops.abs(g) >= threshold, g.dtype)
    return ops.reshape(signs / (ops.sum(ops.abs(signs), axis=1, keepdims=True) + 1e-10), grad.shape)


def checkpoints(steps):
    """The checkpoints `w_j = ceil(p_j * steps)` of APGD, as a sorted list of distinct ints <= `steps`;
    computed in exact hundredths, so `checkpoints(100) == [0, 22, 41, 57, 70, 80, 87, 93, 99]`."""
    p = [0, 22]
    while p[-1] < 100:
        p.append(p[-1] + max(p[-1] - p[-2] - 3, 6))
    return sorted({-(-pj * steps // 100) for pj in p if -(-pj * steps // 100) <= steps})


def l1_marks(steps):
    """APGD-L1's checkpoints: the evaluations `[p, 2p, ...] <= steps`, `p = max(floor(0.04 steps), 1)`."""
    period = max(int(0.04 * steps), 1)
    return list(range(period, steps + 1, period))


def schedule(steps, norm):
    """`[(plain steps, then one checkpoint step?)]` over the `steps + 1` evaluations (the start point
    first): the checkpoints `w_j` (L1: `l1_marks`) fall on the evaluation of iterate `w_j`."""
    segments, last = [], -1
    for mark in l1_marks(steps) if norm == 1 else checkpoints(steps)[1:]:
        segments.append((mark - last - 1, True))
        last = mark
    return segments + [(steps - last, False)]


def stages(eps, steps):
    """`use_largereps`' runs `[(eps, steps)]`: 3, 2 and 1 times eps over ceil(30%), ceil(30%) and the
    rest of `steps`; below 3 steps one run at eps (the last run must have a step)."""
    if steps < 3:
        return [(eps, steps)]
    first = math.ceil(0.3 * steps)
    return [(3.0 * eps, first), (2.0 * eps, first), (eps, steps - 2 * first)]


def sphere_start(x0, eps, norm, rng):
    """AutoAttack's start `(n, ...)` (numpy): x0 plus eps times a random Linf- or L2-normalised
    direction; L1: x0 plus a standard gaussian, which the caller projects onto the L1-ball and the box."""
    if norm == 1:
        return x0 + rng.standard_normal(size=x0.shape).astype(x0.dtype)
    if norm == np.inf:
        t = rng.uniform(-1.0, 1.0, size=x0.shape)
        scale = np.abs(t).reshape(len(t), -1).max(axis=1).reshape((-1,) + (1,) * (x0.ndim - 1))
    else:
        t = rng.standard_normal(size=x0.shape)
        scale = geometry.per_sample_norm(t)
    return x0 + (eps * t / np.maximum(scale, geometry.TINY)).astype(x0.dtype)


def _l1_initial(x_start, x0, given):
    """Per-row `(topk, sp_old)` float32 `(n,)` of an L1 run: (0.2, d) from a random start, else from the
    sparsity of the given start `x_start` (numpy)."""
    n, d = len(x0), x0[0].size
    if not given:
        return np.full(n, 0.2, np.float32), np.full(n, d, np.float32)
    sp = np.count_nonzero((x_start - x0).reshape(n, -1), axis=1).astype(np.float32)
    return sp / d / REDUCE_STEP, sp


def _init(objective, x_start, x0, n, eps, norm, given):
    """`init(start, stop, pad) -> (state, {"x0": clean rows})`: a batch's state before the evaluation of
    its start point, and its clean input (a constant of the step). The step size starts at 2 * eps
    (L1: eps, with the sparsity records of `_l1_initial`; `given`: the start was given); with a
    per-feature eps (Linf) `eta` is the factor 2 of the eps array, halved alike."""
    per_row = dict(
        values=np.zeros(n, np.float32),
        best_values=np.full(n, -np.inf, np.float32),
        best_at_check=np.zeros(n, np.float32),
        eta=np.full(n, (1.0 if norm == 1 else 2.0) * (eps if np.ndim(eps) == 0 else 1.0), np.float32),
        n_increases=np.zeros(n, np.int32),
        success=np.zeros(n, bool),
        best_hit=np.zeros(n, bool),
        reduced=np.ones(n, bool),
        active=np.ones(n, bool),
        best_grad=np.zeros(x_start.shape, np.int8 if norm == np.inf else np.float32),
    )
    if norm == 1:
        per_row["topk"], per_row["sp_old"] = _l1_initial(x_start, x0, given)

    def init(start, stop, pad):
        x = objective.batch_rows(x_start, start, stop, pad)
        state = {key: objective.batch_rows(a, start, stop, pad) for key, a in per_row.items()}
        state.update(x=x, adv=x, best_x=x)
        if norm != 1:  # L1's step has no momentum
            state["x_prev"] = x
        counters = dict(k=-1, last_mark=0, n_evaluated=0)
        state.update({key: engine.scalar_int(v) for key, v in counters.items()})
        state["mark"] = backend.to_tensor(np.asarray(False))
        return state, {"x0": objective.batch_rows(x0, start, stop, pad)}

    return init


def _advance(steps, variables, state, fixed, segments):
    """The steps of one batch along `schedule`'s segments, stopping at a checkpoint where no row of the
    batch is still attacked; `steps` are `(plain step, checkpoint step)`."""
    on, off = backend.to_tensor(np.asarray(True)), backend.to_tensor(np.asarray(False))
    for plain, marked in segments:
        state = engine.advance(steps[0], variables, state, fixed, plain)
        if marked:
            state["mark"] = on
            state = engine.advance(steps[1], variables, state, fixed, 1)
            state["mark"] = off
            if not bool(backend.to_numpy(ops.any(state["active"]))):
                break
    return state
