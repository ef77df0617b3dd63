"""The JAX training step that records the diagnostics of the gradients it applies (`wrap_train_step`;
the steps that record nothing run `_common.quiet_train_step`); see `gradkit.backend` and
`gradkit.monitor`."""

import jax
import jax.numpy as jnp

from gradkit.backend import _jax_split
from gradkit.backend._halves import first_half, half_loss


def _loss_scale(optimizer, optimizer_values):
    if hasattr(optimizer, "dynamic_scale"):
        index = [id(v) for v in optimizer.variables].index(id(optimizer.dynamic_scale))
        return optimizer_values[index]
    return optimizer.loss_scale_factor  # None or a float


def _halves_of(model, state, data, scale):
    """The thunk for the halves' gradient: `(g1, b1, b)`, the gradient of the loss on the first half of
    `data` at the step's input state, scaled by `scale` as the step's own (`_halves.py`)."""

    def halves():
        half, b1, b = first_half(data)
        if b1 == 0:  # a batch of one row: no half (the caller refuses it or leaves the step out)
            return [jnp.zeros_like(t) for t in state[0]], b1, b
        loss = lambda t: half_loss(model, t, state[1], state[3], half, scale)  # noqa: E731
        return list(jax.grad(loss)(list(state[0]))), b1, b

    return halves


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`."""
    step_cls = type(model)

    def metric_slots():
        ids = [id(v) for v in model.metrics_variables]
        return [ids.index(id(v)) for v in metric.variables]

    def train_step(state, data):
        optimizer = model.optimizer
        captured = {}
        stateless_apply = optimizer.stateless_apply
        split = getattr(norms_fn, "needs_halves", False) and _jax_split.splittable(model, step_cls, data)

        def capturing_apply(optimizer_values, grads, trainable_values):
            if split:  # the halves' gradients of one backward pass (`_jax_split.py`)
                rows = _jax_split.split_rows(data)
                grads, g1, g2, trainable_values = _jax_split.combine(grads, trainable_values, rows)
                captured["halves"] = lambda: (g1, rows // 2, rows, g2)
            captured["grads"] = list(grads)
            captured["scale"] = _loss_scale(optimizer, optimizer_values)
            return stateless_apply(optimizer_values, grads, trainable_values)

        optimizer.stateless_apply = capturing_apply
        try:
            if split:
                logs, new_state = _jax_split.split_step(model, step_cls, state, data)
            else:
                logs, new_state = step_cls.train_step(model, state, data)
        finally:
            del optimizer.stateless_apply
        trainable, non_trainable, optimizer_values, metric_values = new_state
        metric_values = list(metric_values)
        slots = metric_slots()
        values = [metric_values[i] for i in slots]
        if "grads" in captured:
            weights = (state[0], trainable) if getattr(norms_fn, "needs_weights", False) else ()
            extra = {}
            if getattr(norms_fn, "needs_halves", False):
                extra["halves"] = captured.get("halves") or _halves_of(model, state, data, captured["scale"])
            norms = norms_fn(captured["grads"], captured["scale"], *weights, **extra)
            values = metric.stateless_update_state(values, norms)
            for i, value in zip(slots, values):
                metric_values[i] = value
        logs = dict(logs)
        logs.update(metric.stateless_result(values))
        return logs, (trainable, non_trainable, optimizer_values, metric_values)

    def test_step(state, data):
        logs, state = step_cls.test_step(model, state, data)
        logs = dict(logs)
        for key in metric.result_names():
            logs.pop(key, None)
        return logs, state

    return train_step, test_step
