"""The Square Attack on the attack engine: `_square.square_core`'s random search with its state on the device.

A batch's state (the best point of each row, its objective, the success flags, the per-row query
counts, the iteration index and the random seed) lives in backend tensors; one compiled step
(`backend.compile_search`, forward passes only) draws the proposals (`_square_ops`), evaluates them,
keeps the better ones and freezes the rows that succeeded (the early stop of `square_core`, as a
mask: a frozen row is still computed, not counted). The start is drawn on the host as the core draws
it; the host reads one flag (whether any row of the batch is still attacked) every `CHECK_EVERY`
steps and the result at the end. `p`'s schedule (`_square.p_schedule`) is a table of the iterations
where each halving starts, with the window side and (L2, L1) pattern of each stage: one trace per input
shape for every eps, budget and `p_init`.
"""

import numpy as np
from keras import ops

from gradkit import backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._square import _HALVINGS, as_image
from gradkit.attacks._square_ops import draws, l1_proposal, l2_proposal, linf_proposal
from gradkit.attacks._square_proposals import _window, eta, l1_init, l2_init, linf_ends, linf_init

CHECK_EVERY = 100  # steps between two reads of "any row still attacked?"
_STAGES = len(_HALVINGS) + 1


def schedule(p_init, n_queries, h, w, norm):
    """`(starts (9,) int32, sides (10, 2) int32, patterns (10, 2, h, w) float32)`: the first iteration
    of each halving of `p` (`n_queries` where it is never reached), each stage's window side and, for
    L2, its patterns `eta` and `eta.T` at the canvas' corner (zeros for Linf)."""
    it = (np.arange(max(n_queries - 1, 0)) / n_queries * 10000).astype(np.int64)  # as `p_schedule`
    stage = sum((it > mark).astype(np.int64) for mark in _HALVINGS)
    starts = [int(np.argmax(stage >= k)) if np.any(stage >= k) else n_queries for k in range(1, _STAGES)]
    sides = np.zeros((_STAGES, 2), np.int32)
    patterns = np.zeros((_STAGES, 2, h, w), np.float32)
    for k in range(_STAGES):
        p = p_init / 2**k
        sides[k] = _window(p, h, w) if norm == np.inf else _window(p, h, w, minimum=3, odd=True)
        if norm != np.inf:
            sh, sw = sides[k]
            pattern = eta(sh, sw, 1 if norm == 1 else 2)  # L1's bumps fall off faster
            patterns[k, 0, :sh, :sw] = pattern
            patterns[k, 1, :sh, :sw] = pattern.T if sh == sw else pattern
    return np.asarray(starts, np.int32), sides, patterns


def _propose(state, fixed, u, image, norm, clip):
    """A candidate `(n, *image)` for every row from the uniform draws `u`; at the first step (`i < 0`)
    the start itself (Linf: an empty window, no pass over the batch of its own)."""
    first = state["i"] < 0
    stage = ops.sum(ops.cast(state["i"] >= fixed["starts"], "int32"))
    sides = ops.take(fixed["sides"], stage, axis=0)
    best = ops.reshape(state["x"], (-1,) + image)
    if norm == np.inf:
        return linf_proposal(best, (fixed["plus"], fixed["minus"]), sides, u, empty=first)
    bounds = (fixed["lo"], fixed["hi"]) if clip else None
    proposal = l1_proposal if norm == 1 else l2_proposal
    cand = proposal(best, fixed["x0"], fixed["eps"], fixed["patterns"], stage, sides, u, bounds)
    return ops.where(first, best, cand)


def _step(objective, image, *, norm, targeted, clip):
    """The step as `(propose, keep, draws)` (`backend.compile_search`): `propose(state, fixed, u)` the
    candidate from `draws` uniform numbers per row, then `keep(state, fixed, candidate, (values,
    logits))` the next state."""

    def propose(state, fixed, u):
        return ops.reshape(_propose(state, fixed, u, image, norm, clip), state["x"].shape)

    def keep(state, fixed, cand, aux):
        x = state["x"]
        values, logits = aux
        labels, targets = fixed["y"]
        decision = objective.decide_tensor(logits, fixed["weights"]["alpha"])
        hit = decision == targets if targeted else decision != labels
        active = ops.logical_and(state["active"], fixed["weights"]["rows"] > 0)
        better = ops.logical_and(active, ops.logical_or(values > state["values"], hit))
        new = dict(state, i=state["i"] + 1)
        new["x"] = engine.select_rows(better, cand, x)
        new["values"] = ops.where(better, values, state["values"])
        new["success"] = ops.logical_or(state["success"], ops.logical_and(active, hit))
        new["used"] = state["used"] + ops.cast(active, "int32")
        new["active"] = ops.logical_and(active, ops.logical_not(hit))
        return new

    return propose, keep, draws(norm, image[-1])


def _constants(session, x0, n_queries, p_init, rng):
    """`(start, per-row constants on the host, scalar and table tensors)` of an attack."""
    eps, norm, clip = session.eps, session.norm, session.clip_values
    img0 = as_image(x0)
    init = {np.inf: linf_init, 2.0: l2_init, 1.0: l1_init}[norm]
    start = geometry.project_and_clip(init(img0, eps, rng), img0, eps, norm, clip).reshape(x0.shape)
    if norm == np.inf:
        rows = dict(zip(("plus", "minus"), linf_ends(img0, eps, clip)))
    else:
        rows = {"x0": img0}
    starts, sides, patterns = schedule(p_init, n_queries, *img0.shape[1:3], norm)
    lo, hi = clip or (0.0, 0.0)
    tensors = {k: engine.scalar(v) for k, v in dict(eps=eps, lo=lo, hi=hi).items()}
    tensors.update(starts=backend.to_tensor(starts), sides=backend.to_tensor(sides))
    if norm != np.inf:
        tensors["patterns"] = backend.to_tensor(patterns)
    return start, rows, tensors


def _advance(step, variables, state, fixed, n_queries):
    """`n_queries` steps (the start's evaluation first), stopping at a check where no row is attacked."""
    done = 0
    while done < n_queries:
        k = min(CHECK_EVERY, n_queries - done)
        state = engine.advance(step, variables, state, fixed, k)
        done += k
        if done < n_queries and not bool(backend.to_numpy(ops.any(state["active"]))):
            break
    return state


def square_device(session, x0, labels, targets, *, n_queries, p_init, rng):
    """`square_core` on the engine for the session's objective (the margin loss): `(x_best, success,
    n_queries_used)` for the rows `x0` `(m, ...)` with `labels` (and `targets`, or None). The start
    and each batch's device seed come from `rng` (a `np.random.Generator`); the queried rows are
    added to `session.n_forwards`."""
    image = as_image(x0).shape[1:]
    start, rows, tensors = _constants(session, x0, n_queries, p_init, rng)
    objective = session.objective
    clip = session.clip_values is not None
    static = dict(norm=session.norm, targeted=targets is not None, clip=clip)
    step = objective.search_function("square", *_step(objective, image, **static), image=image, **static)
    (trainables, non_trainables), parts = objective.fixed(labels, targets)
    out = {"x": [], "success": [], "used": []}
    for first, stop, pad, y, weights in parts:
        n = pad or stop - first
        state = dict(x=objective.batch_rows(start, first, stop, pad), i=engine.scalar_int(-1),
                     seed=backend.seed_state(int(rng.integers(2**31 - 1))))  # fmt: skip
        per_row = dict(values=np.full(n, -np.inf, np.float32), success=np.zeros(n, bool),
                       active=np.ones(n, bool), used=np.zeros(n, np.int32))  # fmt: skip
        state.update({k: objective.batch_rows(a, 0, n, None) for k, a in per_row.items()})
        fixed = dict(tensors, y=y, weights=weights)
        fixed.update({k: objective.batch_rows(a, first, stop, pad) for k, a in rows.items()})
        state = _advance(step, (trainables, non_trainables), state, fixed, n_queries)
        for key in out:
            out[key].append(engine.to_host(state[key], stop - first))
    used = np.concatenate(out["used"]).astype(np.int64)
    session.n_forwards += int(used.sum())
    return np.concatenate(out["x"]), np.concatenate(out["success"]), used
