"""Auto-PGD on the attack engine: `_apgd.apgd_core`'s Algorithm 1 with its whole state on the device.

The state of a batch (iterate, previous iterate, gradient, step sizes, counters of increases, the best
point with its gradient (Linf: its sign, int8) and objective, the first successful example) lives in
backend tensors; one compiled step evaluates the objective at the current iterate, records, applies
the checkpoint rule where the step index is a checkpoint, and proposes the next iterate
(`_engine.py`). Rows that succeeded are frozen (the early stop of `apgd_core`, as a mask); the step
counts the rows it really attacked, so the gradient count is that of the numpy core. The host reads
one flag per checkpoint (whether any row of the batch is still attacked) and the result at the end. L1
(Croce & Hein 2021) swaps in its sparse step without momentum and its checkpoint rule (`_apgd_l1.py`)
at the same joints.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (Algorithm 1).
"""

import numpy as np
from keras import ops

from gradkit import backend
from gradkit.attacks import _apgd_l1 as l1
from gradkit.attacks import _engine as engine
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._apgd import checkpoints, sphere_start


def _rows(mask, a):
    return engine.rows_mask(mask, a)


_select = engine.select_rows  # full-size selections on `(n, features)` views


def _kept(grad, norm):
    """The best point's gradient as the state keeps it: for Linf only its sign matters (the step is
    `eta * sign(g)`), kept as int8, a quarter of the bytes read and written per step; else the
    gradient."""
    return ops.cast(ops.sign(grad), "int8") if norm == np.inf else grad


def _record(state, values, hit, grad, active, norm):
    """First successes and best points of the rows `active` evaluated at `state["x"]`."""
    new = dict(state)
    first = ops.logical_and(ops.logical_and(hit, ops.logical_not(state["success"])), active)
    new["adv"] = _select(first, state["x"], state["adv"])
    new["success"] = ops.logical_or(state["success"], first)
    better = ops.logical_and(values > state["best_values"], active)
    new["best_x"] = _select(better, state["x"], state["best_x"])
    new["best_grad"] = _select(better, _kept(grad, norm), state["best_grad"])
    new["best_values"] = ops.where(better, values, state["best_values"])
    new["best_hit"] = ops.where(better, hit, state["best_hit"])  # the best point's own decision (EOT)
    return new


def _checkpoint(state, fixed, active):
    """The step-size rule on the rows `active`, applied where this step is a checkpoint."""
    k = state["k"]
    mark = ops.logical_and(state["mark"], active)
    length = ops.cast(k - state["last_mark"], "float32")
    cond1 = ops.cast(state["n_increases"], "float32") < fixed["rho"] * length
    cond2 = ops.logical_and(ops.logical_not(state["reduced"]), state["best_at_check"] >= state["best_values"])
    halve = ops.logical_and(mark, ops.logical_or(cond1, cond2))
    new = dict(state)
    new["eta"] = ops.where(halve, state["eta"] / 2.0, state["eta"])
    new["x"] = _select(halve, state["best_x"], state["x"])
    new["grad"] = _select(halve, ops.cast(state["best_grad"], state["grad"].dtype), state["grad"])
    new["reduced"] = ops.where(mark, ops.logical_or(cond1, cond2), state["reduced"])
    new["best_at_check"] = ops.where(mark, state["best_values"], state["best_at_check"])
    new["n_increases"] = ops.where(mark, ops.zeros_like(state["n_increases"]), state["n_increases"])
    new["last_mark"] = ops.where(state["mark"], k, state["last_mark"])
    return new


def _propose(state, fixed, norm, bounds, active):
    """`x_{k+1}` on the rows `active`: a projected step of size eta along dir(g), the momentum mix."""
    x, x0 = state["x"], fixed["x0"]
    a = ops.cast(ops.where(state["k"] == 0, 1.0, fixed["momentum"]), x.dtype)
    new = dict(state)
    if norm == np.inf and backend.apgd_linf_step is not None:  # PyTorch: in the gradient's memory
        new["x"], new["x_prev"] = backend.apgd_linf_step(x, state["x_prev"], x0, state["grad"], state["eta"],
                                                         a, fixed["eps"], bounds, active)  # fmt: skip
        return new
    eta = ops.cast(_rows(state["eta"], x), x.dtype)
    z = geometry.project_and_clip_tensor(x + eta * geometry.direction_tensor(state["grad"], norm), x0,
                                         fixed["eps"], norm, bounds)  # fmt: skip
    mixed = x + a * (z - x) + (1 - a) * (x - state["x_prev"])
    moved = geometry.project_and_clip_tensor(mixed, x0, fixed["eps"], norm, bounds)
    new["x_prev"] = x  # a row that stops moving never reads it again: no selection needed
    new["x"] = _select(active, moved, x)
    return new


def _update(objective, norm, clip, expectation=False, checkpoint=True):
    """The step's update; with `expectation` (EOT) a row goes on after its first success, towards the
    highest expected loss (each draw's success is one draw's, the example must fool the others too).
    `checkpoint=False` leaves the checkpoint rule out (a step that is no checkpoint: the rule is then
    the identity). The gradient goes into the state for the rule and the proposal only: a row that
    moves has this step's (or, halved, its best point's), one that does not never uses it again."""

    def update(state, aux, grad, fixed):
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
            state = (l1.checkpoint if norm == 1 else _checkpoint)(state, fixed, active)
        done = ops.logical_and(state["success"], fixed["freeze"] > 0)  # freeze=0: no early stop
        still = active if expectation else ops.logical_and(active, ops.logical_not(done))
        bounds = (fixed["lo"], fixed["hi"]) if clip else None
        state = (
            l1.propose(state, fixed, bounds, still)
            if norm == 1
            else _propose(state, fixed, norm, bounds, still)
        )
        state["active"] = still
        del state["grad"]
        return state

    return update


def _schedule(steps, norm):
    """`[(plain steps, then one checkpoint step?)]` over the `steps + 1` evaluations (the start point
    first): the checkpoints `w_j` of `checkpoints(steps)` (L1: `_apgd_l1.marks(steps)`) fall on the
    evaluation of iterate `w_j`."""
    segments, last = [], -1
    for mark in l1.marks(steps) if norm == 1 else checkpoints(steps)[1:]:
        segments.append((mark - last - 1, True))
        last = mark
    return segments + [(steps - last, False)]


def _init(objective, x_start, x0, n, eps, norm, given):
    """`init(start, stop, pad) -> (state, {"x0": clean rows})`: a batch's state before the evaluation of
    its start point, and its clean input (a constant of the step). The step size starts at 2 * eps
    (L1: eps, with the sparsity records of `_apgd_l1.initial`; `given`: the start was given)."""
    per_row = dict(
        values=np.zeros(n, np.float32), best_values=np.full(n, -np.inf, np.float32),
        best_at_check=np.zeros(n, np.float32), eta=np.full(n, (1.0 if norm == 1 else 2.0) * eps, np.float32),
        n_increases=np.zeros(n, np.int32), success=np.zeros(n, bool), best_hit=np.zeros(n, bool),
        reduced=np.ones(n, bool),
        active=np.ones(n, bool), best_grad=np.zeros(x_start.shape, np.int8 if norm == np.inf else np.float32),
    )  # fmt: skip
    if norm == 1:
        per_row["topk"], per_row["sp_old"] = l1.initial(x_start, x0, given)

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


def apgd_device(session, x0, labels, targets, *, steps, rng, rho, momentum=0.75, eps=None, x_init=None,
                freeze=True):  # fmt: skip
    """`_apgd.apgd_core` on the engine for the session's objective: `(x_adv, success, x_best)` for the
    rows `x0` `(m, ...)` with `labels` (and `targets`, APGD-T, or None); success means misclassification;
    `x_best` is each row's point of highest objective. The start is `x_init` (projected onto the ball
    and box) or drawn from `rng` as the core draws it; `eps` defaults to the session's (`use_largereps`
    runs at larger ones); `freeze=False` keeps attacking rows that succeeded (their best point goes on
    rising: the runs of `use_largereps` before the last, as in AutoAttack). The evaluated rows are
    added to `session.n_gradients`. With EOT (`session.objective.eot_iter` > 1) every row runs all
    `steps` and returns its iterate of highest expected loss, the mean over the draws (Athalye et al.
    2018): a first success is one draw's, and an example on the boundary of one draw fools few others.
    A row returns that point where its own draw fooled the model, else its first successful iterate (as
    AutoAttack's APGD with EOT), so a reported success is always the returned point's."""
    eps = session.eps if eps is None else eps
    norm, clip = session.norm, session.clip_values
    start = sphere_start(x0, eps, norm, np.random.default_rng(rng)) if x_init is None else x_init
    start = geometry.project_and_clip(np.asarray(start, np.float32), x0, eps, norm, clip)
    objective = session.objective
    expectation = objective.eot_iter > 1
    static = dict(norm=norm, clip=clip is not None, expectation=expectation)
    step = objective.step_function("apgd", _update(objective, **static), **static)
    plain = step  # a step that is no checkpoint; eager backends (nothing to compile) leave the rule out
    if backend.EAGER:
        plain = objective.step_function("apgd", _update(objective, **static, checkpoint=False), **static,
                                        checkpoint=False)  # fmt: skip
    lo, hi = clip or (0.0, 0.0)
    fixed_scalars = dict(eps=eps, lo=lo, hi=hi, rho=rho, momentum=momentum, freeze=float(freeze))
    constants = {k: engine.scalar(v) for k, v in fixed_scalars.items()}
    (trainables, non_trainables), parts = objective.fixed(labels, targets)
    init = _init(objective, start, x0, len(labels), eps, norm, x_init is not None)
    results = []
    for first, stop, pad, y, weights in parts:
        state, constant = init(first, stop, pad)
        state = _advance(
            (plain, step),
            (trainables, non_trainables),
            state,
            dict(constants, y=y, weights=weights, **constant),
            _schedule(steps, norm),
        )
        success, final = state["success"], state["adv"]  # the first success, else the best point
        if expectation:  # EOT: the best point where its own draw fooled the model, else the first success
            final = ops.where(_rows(state["best_hit"], state["best_x"]), state["best_x"], final)
        final = ops.where(_rows(success, final), final, state["best_x"])
        results.append(engine.to_host((final, success, state["best_x"]), stop - first))
        session.n_gradients += int(backend.to_numpy(state["n_evaluated"]))
    return tuple(np.concatenate(part) for part in zip(*results))


def _advance(steps, variables, state, fixed, schedule):
    """The steps of one batch along `schedule` (`_schedule`), stopping at a checkpoint where no row of
    the batch is still attacked; `steps` are `(plain step, checkpoint step)`."""
    on, off = backend.to_tensor(np.asarray(True)), backend.to_tensor(np.asarray(False))
    for plain, marked in schedule:
        state = engine.advance(steps[0], variables, state, fixed, plain)
        if marked:
            state["mark"] = on
            state = engine.advance(steps[1], variables, state, fixed, 1)
            state["mark"] = off
            if not bool(backend.to_numpy(ops.any(state["active"]))):
                break
    return state
