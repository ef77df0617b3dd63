"""JAX's training steps: the step that records the diagnostics of the gradients it applies
(`wrap_train_step`), the quiet plain step, the values before a step (read from the step's state), and the
inner attack of adversarial training (see `gradkit.backend` and `gradkit.monitor`).

`wrap_train_step` replaces the optimizer's `stateless_apply` for the duration of `train_step(state,
data)`: the capturing apply keeps the gradients and the loss scale, and after Keras' step `norms_fn`'s
values update the metric's slots of the new state. With `norms_fn.needs_weights` it is called
`norms_fn(grads, scale, before, after)` with the trainable values before and after the update; with
`norms_fn.needs_halves` it gets the thunk of the halves' gradient, from the step's own backward pass
where the step can be split (`noise_scale.py`).
"""

import jax

from gradkit.backend.common import train_steps
from gradkit.backend.jax import noise_scale

plain_train_step = train_steps.quiet_train_step


def values_before_step(model, args, variables):
    """The values of `model.optimizer`'s `variables` before the step `train_step(*args)` (`args[0][2]`)."""
    optimizer_values = args[0][2]
    ids = [id(v) for v in model.optimizer.variables]
    return [optimizer_values[ids.index(id(v))] for v in variables]


def metric_values_before_step(model, args, variables):
    """The values of metric `variables` before the step `train_step(*args)` (`args[0][3]`)."""
    ids = [id(v) for v in model.metrics_variables]
    return [args[0][3][ids.index(id(v))] for v in variables]


def _loss_scale(optimizer, optimizer_values):
    if hasattr(optimizer, "dynamic_scale"):
        index = [id(v) for v in optimizer.variables].index(id(optimizer.dynamic_scale))
        return optimizer_values[index]
    return optimizer.loss_scale_factor  # None or a float


def _capturing_apply(optimizer, captured, split, data):
    """The optimizer's `stateless_apply` for one step, keeping its gradients and loss scale in
    `captured` (the halves' gradients too where the step is split)."""
    stateless_apply = optimizer.stateless_apply

    def capturing_apply(optimizer_values, grads, trainable_values):
        if split:  # the halves' gradients of one backward pass (`noise_scale.py`)
            rows = noise_scale.split_rows(data)
            grads, g1, g2, trainable_values = noise_scale.combine(grads, trainable_values, rows)
            captured["halves"] = lambda: (g1, rows // 2, rows, g2)
        captured["grads"] = list(grads)
        captured["scale"] = _loss_scale(optimizer, optimizer_values)
        return stateless_apply(optimizer_values, grads, trainable_values)

    return capturing_apply


def _norms(model, norms_fn, state, data, captured, trainable):
    """`norms_fn`'s values of the captured step (`trainable`: the values after the update)."""
    weights = (state[0], trainable) if getattr(norms_fn, "needs_weights", False) else ()
    extra = {}
    if getattr(norms_fn, "needs_halves", False):
        halves = captured.get("halves") or noise_scale.halves_of(model, state, data, captured["scale"])
        extra["halves"] = halves
    return norms_fn(captured["grads"], captured["scale"], *weights, **extra)


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`.

    Args:
        model: the compiled Keras model.
        metric: the `GradientNormMetric` the values go into (its slots of the step's metric values).
        norms_fn: `norms_fn(grads, scale, ...)`, the step's values (see the module docstring).

    Returns:
        `(train_step, test_step)`, both `step(state, data) -> (logs, state)`.
    """
    step_cls = type(model)

    def metric_slots():
        ids = [id(v) for v in model.metrics_variables]
        return [ids.index(id(v)) for v in metric.variables]

    def train_step(state, data):
        optimizer, captured = model.optimizer, {}
        split = getattr(norms_fn, "needs_halves", False) and noise_scale.splittable(model, step_cls, data)
        optimizer.stateless_apply = _capturing_apply(optimizer, captured, split, data)
        try:
            if split:
                logs, new_state = noise_scale.split_step(model, step_cls, state, data)
            else:
                logs, new_state = step_cls.train_step(model, state, data)
        finally:
            del optimizer.stateless_apply
        trainable, non_trainable, optimizer_values, metric_values = new_state
        metric_values, slots = list(metric_values), metric_slots()
        values = [metric_values[i] for i in slots]
        if "grads" in captured:
            norms = _norms(model, norms_fn, state, data, captured, trainable)
            values = metric.stateless_update_state(values, norms)
            for i, value in zip(slots, values):
                metric_values[i] = value
        logs = dict(logs)
        logs.update(metric.stateless_result(values))
        return logs, (trainable, non_trainable, optimizer_values, metric_values)

    return train_step, _test_step(metric, step_cls, model)


def _test_step(metric, step_cls, model):
    """The class's `test_step(state, data)` with the norm metric's keys dropped from its logs."""

    def test_step(state, data):
        logs, state = step_cls.test_step(model, state, data)
        logs = dict(logs)
        for key in metric.result_names():
            logs.pop(key, None)
        return logs, state

    return test_step


def input_ascent(forward, loss_of, x, update, steps):
    """`steps` times `x <- update(x, d loss_of(forward(x)) / dx)`, each gradient `jax.grad` w.r.t. `x` of
    `forward` (a pure function of `x`; inside the jitted step it reads the traced variable values); no
    gradient flows back through the result (the adversarial-training inner attack)."""
    grad = jax.grad(lambda z: loss_of(forward(z)))
    x = jax.lax.stop_gradient(x)
    for _ in range(steps):
        x = jax.lax.stop_gradient(update(x, grad(x)))
    return x
