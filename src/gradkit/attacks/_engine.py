"""The attack engine: an attack's state as a dict of backend tensors, advanced by one compiled step.

An attack writes its state (the iterate `x` and its records) and a pure `update(state, (values,
logits), grad, fixed) -> state` in `keras.ops`; `AttackGradient.step_function` compiles the gradient of
the objective and that update into one call (`backend.compile_step`). The Python loop only calls the
step: nothing goes to numpy between steps, only at the public boundary (the batch in, the result out)
and where an attack reads per-sample flags at its checkpoints. `fixed` holds what a run keeps
constant: the labels and targets `y`, the row and ensemble weights, and the attack's scalars (eps,
step size, clip bounds) as tensors, so that a robustness curve over many epsilons traces once. The
loop stays in Python, one compiled call per step (faster on a CPU than one fused loop).

The minimum-norm contract (FMN, DDN; FAB's result too) lives here too: each sample's smallest
adversarial example, kept in the state, the batch loop that returns it, and its landing just past the
decision boundary (`past_boundary`), so that an example counted as adversarial stays adversarial when
the user predicts it alone or in another batch.
"""

import contextlib
import contextvars
import math

import numpy as np
from keras import ops, tree

from gradkit import backend
from gradkit.attacks import geometry
from gradkit.attacks._frame import step_function


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
    trace = _TRACE.get()
    with backend.out_of_memory_hint(tree.flatten(state["x"])[0].shape[0]):
        for _ in range(n_steps):
            state = step(*variables, state, fixed)
            if trace is not None:
                trace.note(state, fixed)
    return state


# ---------------------------------------------------------------------------------------------------
# The loss trace of an ascent (APGD's best loss, PGD's best loss where it keeps one), for the
# convergence checks of `gradkit.evaluate`.


class LossTrace:
    """Per step, the best loss of each row an ascent has not fooled yet (NaN once fooled, and on padding
    rows), as backend tensors appended after every step of `advance`, read only by `tails`.

    Each run (a batch of one APGD or PGD call: one restart, its stacked targets) is one list; a run
    starts where `advance` gets another `fixed`. States without a best loss and a success record (FAB,
    Square, the minimum-norm attacks) add nothing."""

    def __init__(self):
        self.runs, self._fixed = [], None

    def note(self, state, fixed):
        """Appends the step's best losses of the rows not fooled (one elementwise op, nothing read)."""
        key = "best_values" if "best_values" in state else "value" if "value" in state else None
        if key is None or "success" not in state:
            return
        if fixed is not self._fixed:
            self._fixed = fixed
            self.runs.append([])
        out = ops.logical_or(state["success"], fixed["weights"]["rows"] <= 0)
        self.runs[-1].append(ops.where(out, np.float32(np.nan), state[key]))

    def tails(self, share=0.1):
        """`(start, end, count)` floats: the summed best loss of the rows no run fooled, at the step where
        its last `share` of steps begins and at its last step, and how many rows (pooled over the runs;
        rows whose loss is not finite at either step are left out). One read per run."""
        start = end = count = 0.0
        for run in self.runs:
            losses = backend.to_numpy(ops.stack(run)).astype(np.float64)  # (steps, rows)
            first = max(0, len(losses) - 1 - max(1, round(share * len(losses))))
            kept = np.isfinite(losses[first]) & np.isfinite(losses[-1])
            start += float(losses[first, kept].sum())
            end += float(losses[-1, kept].sum())
            count += float(kept.sum())
        return start, end, count


_TRACE = contextvars.ContextVar("gradkit_loss_trace", default=None)


@contextlib.contextmanager
def tracing_losses():
    """Records the per-step best loss of the ascents (APGD, PGD, BIM) run inside the block.

    Yields:
        A `LossTrace`: per run, one float32 backend tensor `(rows,)` per step, the best loss of each row
        not yet fooled (NaN once fooled and on padding rows), appended on the device without a read;
        `tails(share=0.1)` reads each run once and returns `(start, end, count)` floats. FAB, Square and
        the minimum-norm attacks add nothing. Nothing is raised; traces nest (the innermost records).

    Example:
        >>> with gradkit.attacks.tracing_losses() as trace:  # doctest: +SKIP
        ...     gradkit.apgd(model, x, y, eps=0.1)
        >>> start, end, count = trace.tails()  # doctest: +SKIP
    """
    trace = LossTrace()
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


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
    step = step_function(objective, name, update, frame.mask, **static)
    lo, hi = clip or (0.0, 0.0)
    scalars = {k: scalar(v) for k, v in dict(constants, lo=lo, hi=hi, steps=steps).items()} | frame.tensors()
    worst = geometry.worst_norm(x0, clip, norm, frame.mask)
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
        return to_host((state["best_x"], state["found"], state["x"]), count)

    parts = run(objective, step, labels, labels, scalars, init, steps, finish)
    frame.n_gradients += len(labels) * steps  # one gradient of every row a step (`recording()` reads it)
    best, found, last = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return past_boundary(frame, np.where(rows_mask_host(found, best), best, last), found)


# A returned example is adversarial for every batch size: its logit gap is beyond the float rounding
# by which batches of other sizes differ (a gap of 6e-8 flips between a batch and a row alone).
SETTLED_GAP = 1e-5  # the top-two logit gap each member needs, relative to max(1, its largest |logit|)
OVERSHOOTS = (0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)  # the relative moves past the boundary, in turn


def rows_mask_host(flags, like):
    """`flags` `(n,)` numpy shaped to broadcast against the numpy `like` `(n, ...)`."""
    return np.reshape(flags, (-1,) + (1,) * (np.ndim(like) - 1))


def settled(frame, x):
    """bool `(n,)`: `x` fools the real decision rule (leaves the label; targeted: reaches the target)
    and every member's top-two logit gap exceeds `SETTLED_GAP * max(1, max |z|)`, so that the decision
    is the same in a batch of any size. One forward pass, counted."""
    _, logits = frame.objective.bind(frame.labels, frame.labels if frame.targeted else None)(x)
    frame.n_forwards += len(x)
    decision = frame.objective.decide(logits)
    fooled = decision == frame.labels if frame.targeted else decision != frame.labels
    top = -np.sort(-np.asarray(logits, np.float64), axis=-1)[..., :2]
    scale = np.maximum(1.0, np.abs(top[..., 0]))
    return fooled & np.all(top[..., 0] - top[..., 1] > SETTLED_GAP * scale, axis=0)


def past_boundary(frame, candidates, found):
    """Each candidate example moved just past the decision boundary: `x0 + (1 + s) (x - x0)`, clipped
    to the box, for the smallest `s` of `OVERSHOOTS` at which it is `settled` (FAB's overshoot `eta`,
    but only as far as the rounding needs: s <= 1e-2, the norm grows by at most that factor, in
    practice 1e-5 to 1e-3). A minimum-norm attack's iterate can end on the boundary itself (a gap of 0
    or 6e-8 on a linear model) and be counted broken in its batch while the same row alone predicts
    its label; here no candidate is kept unless it is adversarial by a margin every batch size sees.

    Args:
        frame: the attack's `Frame` (x0 float32 `(n, ...)`, labels, clip_values).
        candidates: float32 like `frame.x0`, the examples to land (the clean input where none).
        found: bool `(n,)`, the attack's own success; it stands only where a candidate is the clean
            input itself (a point misclassified clean).

    Returns:
        `(x_adv, found)`: float32 like `x0` (the clean input where no overshoot settles) and bool `(n,)`.
    """
    x0, clip = frame.x0, frame.clip_values
    moved = np.any((candidates != x0).reshape(len(x0), -1), axis=1)
    out, found = x0.copy(), np.asarray(found, bool) & ~moved
    for s in OVERSHOOTS:
        todo = moved & ~found
        if not todo.any():
            break
        trial = (x0 + (candidates - x0) * np.float32(1.0 + s)).astype(np.float32)
        if clip is not None:
            trial = np.clip(trial, np.float32(clip[0]), np.float32(clip[1]))
        good = todo & settled(frame, np.where(rows_mask_host(todo, x0), trial, x0))
        out[good], found[good] = trial[good], True
    return out, found
