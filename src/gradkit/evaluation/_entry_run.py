"""One attack of `evaluate`'s cascade on the points still robust, block by block, each success confirmed
on the model's real decision rule."""

import dataclasses
import time

import numpy as np
from tqdm.auto import tqdm

from gradkit import attacks as registry
from gradkit.errors import DisconnectedGradientError, OutOfMemoryError
from gradkit.evaluation import _convergence, _plan


def _attack(model, x_rows, y_rows, entry, config, seed, state):
    """Runs `entry` on some rows; returns `(x_adv, success (m,) bool, zero_gradient (m,) bool or None)`."""
    if entry.fn is not None:
        x_adv = _plan.check_adversarial(
            entry, x_rows, entry.fn(model, x_rows, y_rows, eps=config.attack_eps), config
        )
        return x_adv, fooled(model, x_adv, y_rows, config, state), None
    with _convergence.tracing(entry, config, state.per_attack[entry.name]):
        result = registry.run_attack(
            entry.attack,
            model,
            x_rows,
            y_rows,
            eps=config.attack_eps,
            norm=config.norm,
            clip_values=config.box or config.clip_values,
            batch_size=config.batch_size,
            seed=seed,
            **_plan.options(entry, config),
            **({} if config.mask is None else {"mask": config.mask}),
        )
    state.n_forwards += int(result.n_forwards)
    state.n_gradients += int(result.n_gradients)
    if result.from_probabilities and entry.name not in state.from_probabilities:
        state.from_probabilities.append(entry.name)
    x_adv, hit = np.asarray(result.x_adv), np.asarray(result.success, bool)
    return x_adv, _confirm(model, x_adv, y_rows, hit, config, state), result.zero_gradient


def attack_halving(model, x_rows, y_rows, entry, config, seed, state):
    """`(_attack's result, config)`: `_attack` on one block, retried with `batch_size` halved (down to 1
    row) after each `OutOfMemoryError`, with the block's rows and seed unchanged; `config` is the one
    that ran (its `batch_size` the last tried). Every attack but Square draws its randomness per
    block, so its result does not depend on the rows per compiled call."""
    tried = []
    while True:
        try:
            return _attack(model, x_rows, y_rows, entry, config, seed, state), config
        except OutOfMemoryError as error:
            rows = config.batch_size or len(y_rows)
            tried.append(rows)
            if rows <= 1:
                cause = error.__cause__ or error
                first = (str(cause).strip().splitlines() or [""])[0][:200]
                raise OutOfMemoryError(
                    f"The device ran out of memory in {entry.name} on a block of {len(y_rows)} rows at every "
                    f"batch_size tried (batch_size={', '.join(map(str, tried))}): even one row per compiled "
                    f"call does not fit ({type(cause).__name__}: {first}). Free the device's memory or "
                    "evaluate a smaller model."
                ) from cause
            config = dataclasses.replace(config, batch_size=max(rows // 2, 1))


def fooled(model, x_adv, y_rows, config, state):
    """(m,) bool: `x_adv` fools the model's decision rule. On a randomized model (the probe of `clean`
    fired) one prediction is one draw: the example must fool more than half of `eot_iter` predictions,
    each a new draw, so that a verdict does not rest on one lucky draw (AutoAttack judges one)."""
    repeats = config.eot_iter if state.randomized else 1
    wrong = sum(registry.decide(model, x_adv, config.batch_size) != y_rows for _ in range(repeats))
    state.n_forwards += repeats * len(y_rows)
    return 2 * wrong > repeats


def _confirm(model, x_adv, y_rows, hit, config, state):
    """`hit` (m,) bool where `decide` agrees that `x_adv` fools the model (`fooled`); counts the
    disagreements."""
    confirmed = hit.copy()
    if hit.any():
        confirmed[hit] = fooled(model, x_adv[hit], y_rows[hit], config, state)
        state.unconfirmed += int(hit.sum() - confirmed.sum())
    return confirmed


def _blocks(todo, step, first_block):
    """`(j, rows)`: the rows of `todo` in each block `[j * step, (j + 1) * step)`, j from `first_block`."""
    blocks = todo // step
    for j in np.unique(blocks):
        yield first_block + int(j), todo[blocks == j]


_COUNTS = ("n_points", "n_broken", "n_forwards", "n_gradients", "seconds")


def run_entry(model, x, labels, entry, config, state, first_block=0, tasks=None, save=None):
    """Runs `entry` on the points still robust, block by block of `batch_size` rows (block j, counted from
    `first_block`, seeded with `seed + j`), and records it in `state`. `tasks`: None, or the `_tasks.Tasks`
    of a process group: a block it does not `claim` is skipped (another process runs it), and each block
    attacked is reported `done`. `save`: None, or `save(rows)` called after each block with the rows it
    changed (`state.blocks[entry.name]` lists the finished blocks and `state.per_attack[entry.name]` holds
    the counts so far): a `state` saved there and loaded again resumes at the next block, with the
    result of an uninterrupted run (a block's attack depends only on its rows and its seed). On an
    `OutOfMemoryError` the block is retried with `batch_size` halved, kept for the blocks after it."""
    done = state.blocks.setdefault(entry.name, [])
    record = {"no_gradient": False, **dict.fromkeys(_COUNTS, 0), **state.per_attack.get(entry.name, {})}
    state.per_attack[entry.name] = record
    before = (state.n_forwards - record["n_forwards"], state.n_gradients - record["n_gradients"])
    t0, skip = time.perf_counter() - record["seconds"], set(done)
    step = config.batch_size or max(len(state.robust), 1)
    blocks = [
        (k, rows) for k, rows in _blocks(np.flatnonzero(state.robust), step, first_block) if k not in skip
    ]
    with tqdm(
        total=sum(map(len, (r for _, r in blocks))), desc=entry.name, disable=config.verbose == 0
    ) as bar:
        for k, rows in blocks:
            if tasks is not None and not tasks.claim(entry.name, k):
                continue
            seed = None if config.seed is None else config.seed + k
            try:
                (x_adv, hit, zero), config = attack_halving(
                    model, x[rows], labels[rows], entry, config, seed, state
                )
            except DisconnectedGradientError:  # a gradient attack on a non-differentiable model: flagged
                x_adv, hit, zero = x[rows], np.zeros(len(rows), bool), np.ones(len(rows), bool)
                record["no_gradient"] = True
            state.x_adv[rows] = x_adv
            state.robust[rows[hit]] = False
            for i in rows[hit]:
                state.broken_by[i] = entry.name
            if zero is not None:
                state.zero_gradient[rows] |= np.asarray(zero, bool)
            record["n_broken"] += int(hit.sum())
            record["n_points"] += len(rows)
            record["n_forwards"], record["n_gradients"] = (
                state.n_forwards - before[0],
                state.n_gradients - before[1],
            )
            record["seconds"] = time.perf_counter() - t0
            done.append(k)
            bar.update(len(rows))
            bar.set_postfix(robust=f"{state.robust.mean():.4f}")
            if tasks is not None:
                tasks.done(entry.name, k)
            if save is not None:
                save(rows)
    state.finished.append(entry.name)
    attacked = record["n_points"]
    state.per_attack[entry.name] = {
        "accuracy": 1.0 - record["n_broken"] / attacked if attacked else None,
        "robust_accuracy": float(state.robust.mean()),
        **{key: record[key] for key in _COUNTS},
        "seconds": time.perf_counter() - t0,
        "no_gradient": record["no_gradient"],
        **{key: record[key] for key in (_convergence.TRACE,) if key in record},
    }
