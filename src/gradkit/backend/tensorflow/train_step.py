"""TensorFlow's training steps: the step that records the diagnostics of the gradients it applies
(`wrap_train_step`), the quiet plain step, the values before a step, and the inner attack of adversarial
training (see `gradkit.backend` and `gradkit.monitor`).

`wrap_train_step` replaces the optimizer's `apply` for the duration of `train_step(data)`: the capturing
apply hands the gradients (made dense) and the loss scale to `norms_fn`, and its values to the metric,
before the step's `compute_metrics` reads the metrics. With `norms_fn.needs_weights` it is called
`norms_fn(grads, scale, before, after)` with the trainable weights' values before and after the update;
with `norms_fn.needs_halves` it gets the thunk of the halves' gradient (`noise_scale.py`).
"""

import tensorflow as tf

from gradkit.backend.common import train_steps
from gradkit.backend.tensorflow.noise_scale import half_gradients

plain_train_step = train_steps.quiet_train_step
values_before_step = train_steps.values_before_step
metric_values_before_step = train_steps.metric_values_before_step


def _loss_scale(optimizer, trainable_variables):
    train_steps.build_optimizer(optimizer, trainable_variables)
    if hasattr(optimizer, "dynamic_scale"):
        return tf.convert_to_tensor(optimizer.dynamic_scale.value)
    return optimizer.loss_scale_factor  # None or a float


def _halves(model, data, norms_fn, read, scale):
    """{"halves": the halves' gradient thunk} for a `norms_fn` that needs it, else {}; `read()`: the
    weights before the update."""
    if not getattr(norms_fn, "needs_halves", False):
        return {}
    return {"halves": lambda: half_gradients(model, data, read(), scale)}


def _apply_between_reads(model, metric, norms_fn, data, apply, grads, trainable_variables, dense):
    """The update between two reads of the weights, and the norms of the gradients and weights."""
    # The weights read before the update keep their values (TensorFlow copies a variable's buffer on
    # write while a read of it is alive); the reads after it see the new ones.
    variables = list(trainable_variables or model.trainable_variables)
    scale = _loss_scale(model.optimizer, trainable_variables)
    # `v.value` is the tf.Variable itself (read where it is used): convert_to_tensor reads it now.
    before = [tf.convert_to_tensor(v.value) for v in variables]
    result = apply(grads, trainable_variables)
    after = [tf.convert_to_tensor(v.value) for v in variables]
    halves = _halves(model, data, norms_fn, lambda: before, scale)
    metric.update_state(norms_fn(dense, scale, before, after, **halves))
    return result


def _capturing_apply(model, metric, norms_fn, data, apply):
    """The optimizer's `apply` for one step, recording the norms of the gradients it applies."""

    def capturing_apply(grads, trainable_variables=None):
        grads = list(grads)
        dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if getattr(norms_fn, "needs_weights", False):
            return _apply_between_reads(
                model, metric, norms_fn, data, apply, grads, trainable_variables, dense
            )
        scale = _loss_scale(model.optimizer, trainable_variables)
        variables = list(trainable_variables or model.trainable_variables)
        read = lambda: [tf.convert_to_tensor(v.value) for v in variables]  # noqa: E731
        values = norms_fn(dense, scale, **_halves(model, data, norms_fn, read, scale))
        metric.update_state(values)  # before the step's compute_metrics reads the metrics
        # The update runs after the norms have read the gradients, so that it may reuse their buffers
        # (TensorFlow forwards a buffer to an op only when nothing else still reads it).
        with tf.control_dependencies([values]):
            return apply(grads, trainable_variables)

    return capturing_apply


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`.

    Args:
        model: the compiled Keras model.
        metric: the `GradientNormMetric` the values go into.
        norms_fn: `norms_fn(grads, scale, ...)`, the step's values (see the module docstring).

    Returns:
        `(train_step, test_step)`, both `step(data)`.
    """
    step_cls = type(model)

    def train_step(data):
        optimizer = model.optimizer
        optimizer.apply = _capturing_apply(model, metric, norms_fn, data, optimizer.apply)
        try:
            logs = dict(step_cls.train_step(model, data))
        finally:
            del optimizer.apply
        if any(key not in logs for key in metric.result_names()):  # a train_step that skips the metrics
            logs.update(metric.result())
        return logs

    return train_step, train_steps.test_step_without(metric, step_cls, model)


def input_ascent(forward, loss_of, x, update, steps):
    """`steps` times `x <- update(x, d loss_of(forward(x)) / dx)`, each gradient a `tf.GradientTape` w.r.t.
    `x` alone, traced into the enclosing step (the adversarial-training inner attack); no gradient flows
    back through the result."""
    x = tf.stop_gradient(x)
    for _ in range(steps):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            loss = loss_of(forward(x))
        x = tf.stop_gradient(update(x, tape.gradient(loss, x)))
    return x
