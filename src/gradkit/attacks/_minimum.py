"""What the minimum-norm attacks (FMN, DDN) share: validation, the compiled objective, the success rule
inside the step, the record of each sample's smallest adversarial example, and the batch loop on the
attack engine (`_engine.py`).

Contract (shared with FAB): a minimum-norm attack returns a float32 array shaped like `x` holding, per
sample, the smallest adversarial example found, or the clean `x` where none was found.
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _engine as engine
from gradkit.attacks._norm_balls import row_norm
from gradkit.attacks._prepare import gradient_for, owner, prepare, step_for
from gradkit.attacks._session import default_batch


def refuse_eps(name, options):
    """TypeError when `eps` (or any other unknown keyword) reaches a minimum-norm attack."""
    if "eps" in options:
        raise TypeError(
            f"{name} is a minimum-norm attack and takes no `eps`: it returns each sample's smallest "
            "adversarial example. For the accuracy at given eps use gradkit.min_norm(...).accuracy_at(eps) "
            f"or gradkit.robustness_curve(..., attack={name!r}). Received: eps={options['eps']!r}"
        )
    if options:
        raise TypeError(f"{name}() got unexpected keyword arguments: {sorted(options)}")


def setup(model, x, y, *, loss, targeted, clip_values, batch_size, output):
    """`(objective, x0, labels)`: the cached compiled objective ("margin" or "ce") and the validated
    inputs and labels (the targets when `targeted`; then `y` is required)."""
    targeted = _checks.check_flag(targeted, "targeted")
    clip = _checks.check_clip_values(clip_values)
    batch_size = _checks.check_batch_size(batch_size)
    if targeted and y is None:
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    if isinstance(x, (list, tuple, dict)):
        raise TypeError(f"`x` must be one array: minimum-norm attacks take single-input models. Received: "
                        f"x of type {type(x).__name__}")  # fmt: skip
    grad = gradient_for(model, loss=loss, output=output, batch_size=batch_size)
    x0, labels, _ = prepare(grad, x, y, clip, batch_size)
    if x0.ndim < 2:
        raise ValueError(f"`x` must have a batch axis and features. Received: x.shape={x0.shape}")
    objective = step_for(owner(model), grad, loss=loss, objective="loss_sum", targeted=targeted,
                         output=output, batch_size=batch_size or default_batch(x0))  # fmt: skip
    return objective, x0.astype(np.float32, copy=False), labels.astype(np.int32), clip


def hit(objective, logits, fixed, targeted):
    """Per-sample success `(n,)` on the real decision rule: the target reached, or the label left."""
    decision = objective.decide_tensor(logits, fixed["weights"]["alpha"])
    labels, targets = fixed["y"]
    return decision == targets if targeted else decision != labels


def record(state, fixed, success, norm):
    """The smallest adversarial example so far: where `success` and the current norm is smaller."""
    delta = state["x"] - fixed["x0"]
    size = row_norm(delta, norm)
    better = ops.logical_and(
        ops.logical_and(success, size < state["best_norm"]), fixed["weights"]["rows"] > 0
    )
    new = dict(state)
    new["best_norm"] = ops.where(better, size, state["best_norm"])
    new["best_x"] = ops.where(engine.rows_mask(better, state["x"]), state["x"], state["best_x"])
    new["found"] = ops.logical_or(state["found"], success)
    return new, delta, size


def worst_norm(x0, clip, norm):
    """The largest norm a perturbation inside the box can have, per sample `(n,)` float32 (inf without a
    box): the clip of the radius, as in adv-lib."""
    if clip is None:
        return np.full(len(x0), np.inf, np.float32)
    far = np.maximum(x0 - clip[0], clip[1] - x0).reshape(len(x0), -1).astype(np.float64)
    size = np.count_nonzero(far, axis=1) if norm == 0 else np.linalg.norm(far, ord=norm, axis=1)
    return size.astype(np.float32)


def run(
    objective, update, name, static, x0, labels, *, start, per_row, constants, steps, norm, clip, extra=None
):
    """Runs `steps` compiled steps per batch from `start`; returns `(x_adv, found)` numpy.

    `per_row` holds numpy arrays `(n, ...)` added to each batch's state, `extra` those added to its
    `fixed` (constant through the run); `constants` the scalars of `fixed`.
    """
    step = objective.step_function(name, update, **static)
    lo, hi = clip or (0.0, 0.0)
    scalars = {k: engine.scalar(v) for k, v in dict(constants, lo=lo, hi=hi, steps=steps).items()}
    worst = worst_norm(x0, clip, norm)
    n = len(labels)
    rows = dict(per_row, best_norm=worst.copy(), found=np.zeros(n, bool))

    def init(first, stop, pad):
        state = {key: objective.batch_rows(a, first, stop, pad) for key, a in rows.items()}
        state["x"] = objective.batch_rows(start, first, stop, pad)
        state["best_x"] = objective.batch_rows(x0, first, stop, pad)
        state["k"] = engine.scalar_int(0)
        constant = {"x0": objective.batch_rows(x0, first, stop, pad),
                    "worst": objective.batch_rows(worst, first, stop, pad)}  # fmt: skip
        constant.update({key: objective.batch_rows(a, first, stop, pad) for key, a in (extra or {}).items()})
        return state, constant

    def finish(state, count):
        return engine.to_host((state["best_x"], state["found"]), count)

    parts = engine.run(objective, step, labels, labels, scalars, init, steps, finish)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def cosine(fixed, k, start, final):
    """Cosine annealing from `start` at step 0 towards `final` at step `steps` (a float32 tensor)."""
    c = (1.0 + ops.cos(np.pi * ops.cast(k, "float32") / fixed["steps"])) / 2.0
    return final + (start - final) * c
