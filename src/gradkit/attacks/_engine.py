"""The attack engine: an attack's state as a dict of backend tensors, advanced by one compiled step.

An attack writes its state (the iterate `x` and its records) and a pure `update(state, (values,
logits), grad, fixed) -> state` in `keras.ops`; `AttackGradient.step_function` compiles the gradient of
the objective and that update into one call (`backend.compile_step`). The Python loop only calls the
step: nothing goes to numpy between steps, only at the public boundary (the batch in, the result out)
and where an attack reads per-sample flags at its checkpoints. `fixed` holds what a run keeps
constant: the labels and targets `y`, the row and ensemble weights, and the attack's scalars (eps,
step size, clip bounds) as tensors, so that a robustness curve over many epsilons traces once. The
loop stays in Python, one compiled call per step (faster on a CPU than one fused loop).

The minimum-norm contract (FMN, DDN) lives here too: each sample's smallest adversarial example, kept
in the state, and the batch loop that returns it.
"""

import math

import numpy as np
from keras import ops, tree

from gradkit import backend
from gradkit.attacks import geometry


def scalar(value):
    """A float32 scalar tensor: an argument of the compiled step, never a constant of its trace."""
    return backend.to_tensor(np.asarray(value, np.float32))


def scalar_int(value):
    """An int32 scalar tensor (a counter of the state)."""
    return backend.to_tensor(np.asarray(value, np.int32))


def fast_path(name, default):
    """The backend's fast path `name` (`backend.linf_step`, `apgd_linf_step`, `linf_window`: the same
    values as the `keras.ops` code, computed in place) where the backend has one, else `default`."""
    return getattr(backend, name) or default


def rows_mask(mask, a):
    """`mask` `(n,)` reshaped to broadcast against `a` `(n, ...)`."""
    return ops.reshape(mask, (-1,) + (1,) * (len(a.shape) - 1))


def select_rows(mask, new, old):
    """Per sample: the rows of `new` where `mask`, else those of `old` (any structure of tensors).

    Selected on `(n, features)` views with the mask as `(n, 1)`: TensorFlow's select broadcasting an
    `(n, 1, 1, 1)` mask over an image batch is several times slower (the same values)."""

    def select(a, b):
        if len(a.shape) <= 2:
            return ops.where(rows_mask(mask, a), a, b)
        rows = ops.reshape(mask, (-1, 1))
        shape = (-1, math.prod(a.shape[1:]))
        return ops.reshape(ops.where(rows, ops.reshape(a, shape), ops.reshape(b, shape)), a.shape)

    return tree.map_structure(select, new, old)


def to_host(structure, rows):
    """The first `rows` rows of every tensor of `structure`, as numpy arrays."""
    return tree.map_structure(lambda t: backend.to_numpy(t)[:rows], structure)


def run(objective, step, labels, targets, constants, init, n_steps, finish):
    """Runs an attack batch by batch: `finish(state, rows)` of each batch's state after `n_steps`.

    Args:
        objective: the `AttackGradient` the step was compiled from (its batches, its variables).
        step: the compiled step (`AttackGradient.step_function`).
        labels, targets: int32 `(n,)` numpy; targets None for an untargeted objective.
        constants: dict of scalar tensors added to `fixed` (eps, step size, ...).
        init: `init(start, stop, pad) -> (state, constant)`: the batch's initial state on the device, and
            its tensors that no step changes (the clean input), added to `fixed` (not carried in the
            state: `jax.jit` copies every array it returns, even one it did not change).
        n_steps: compiled steps per batch.
        finish: `finish(state, rows) -> numpy result` of a batch (the only read back to the host).

    Returns:
        The per-batch results of `finish`, in row order.
    """
    (trainables, non_trainables), parts = objective.fixed(labels, targets)
    results = []
    for start, stop, pad, y, weights in parts:
        state, constant = init(start, stop, pad)
        fixed = dict(constants, y=y, weights=weights, **constant)
        state = advance(step, (trainables, non_trainables), state, fixed, n_steps)
        results.append(finish(state, stop - start))
    return results


def advance(step, variables, state, fixed, n_steps):
    """`n_steps` calls of the compiled `step` from `state`, with nothing read back to the host. The
    backend's out-of-memory error is re-raised as `gradkit.OutOfMemoryError`, naming `batch_size`."""
    with backend.out_of_memory_hint(tree.flatten(state["x"])[0].shape[0]):
        for _ in range(n_steps):
            state = step(*variables, state, fixed)
    return state


# ---------------------------------------------------------------------------------------------------
# The minimum-norm contract: per sample the smallest adversarial example found, else the clean input.


def hit(objective, logits, fixed, targeted):
    """Per-sample success `(n,)` on the real decision rule: the target reached, or the label left."""
    decision = objective.decide_tensor(logits, fixed["weights"]["alpha"])
    labels, targets = fixed["y"]
    return decision == targets if targeted else decision != labels


def record_smallest(state, fixed, success, norm):
    """The smallest adversarial example so far: where `success` and the current norm is smaller.
    Returns `(state, delta, size)`: the new state, the current perturbation and its norm `(n,)`."""
    delta = state["x"] - fixed["x0"]
    size = geometry.row_norm(delta, norm)
    better = ops.logical_and(
        ops.logical_and(success, size < state["best_norm"]), fixed["weights"]["rows"] > 0
    )
    new = dict(state)
    new["best_norm"] = ops.where(better, size, state["best_norm"])
    new["best_x"] = ops.where(rows_mask(better, state["x"]), state["x"], state["best_x"])
    new["found"] = ops.logical_or(state["found"], success)
    return new, delta, size


def cosine(fixed, k, start, final):
    """Cosine annealing from `start` at step 0 towards `final` at step `steps` (a float32 tensor)."""
    c = (1.0 + ops.cos(np.pi * ops.cast(k, "float32") / fixed["steps"])) / 2.0
    return final + (start - final) * c


def run_min_norm(frame, update, name, static, *, start, per_row, constants, steps, norm, extra=None):
    """Runs `steps` compiled steps of a minimum-norm attack per batch from `start`; returns `(x_adv,
    found)` numpy: per sample the smallest adversarial example (the clean input where none was found).

    `per_row` holds numpy arrays `(n, ...)` added to each batch's state, `extra` those added to its
    `fixed` (constant through the run); `constants` the scalars of `fixed`.
    """
    objective, x0, labels, clip = frame.objective, frame.x0, frame.labels, frame.clip_values
    step = objective.step_function(name, update, **static)
    lo, hi = clip or (0.0, 0.0)
    scalars = {k: scalar(v) for k, v in dict(constants, lo=lo, hi=hi, steps=steps).items()}
    worst = geometry.worst_norm(x0, clip, norm)
    rows = dict(per_row, best_norm=worst.copy(), found=np.zeros(len(labels), bool))

    def init(first, stop, pad):
        state = {key: objective.batch_rows(a, first, stop, pad) for key, a in rows.items()}
        state["x"] = objective.batch_rows(start, first, stop, pad)
        state["best_x"] = objective.batch_rows(x0, first, stop, pad)
        state["k"] = scalar_int(0)
        constant = {"x0": objective.batch_rows(x0, first, stop, pad)}
        constant["worst"] = objective.batch_rows(worst, first, stop, pad)
        constant.update({key: objective.batch_rows(a, first, stop, pad) for key, a in (extra or {}).items()})
        return state, constant

    def finish(state, count):
        return to_host((state["best_x"], state["found"]), count)

    parts = run(objective, step, labels, labels, scalars, init, steps, finish)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
