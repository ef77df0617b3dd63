"""The training-step pieces several backends share.

- `plain_train_step(metric, step_cls, model)` (PyTorch): the class's training step untouched (the steps
  that `every_n_steps` leaves out run it), its logs completed with `metric`'s keys where it reports no
  metrics.
- `quiet_train_step(metric, step_cls, model)` (the `plain_train_step` of TensorFlow and JAX): `metric`
  reports nothing while the step is traced (`metric.quiet()`), so its graph computes nothing of
  `metric`'s, and its logs lack `metric`'s keys (the step has `quiet = True`): `gradkit.monitor` adds
  them on the host (`GradientNormMetric.complete`).
- `values_before_step`, `metric_values_before_step` (TensorFlow, PyTorch): the variables' values read
  before the step (their `train_step(data)` reads and writes the variables themselves).
- `build_optimizer` (TensorFlow, PyTorch): the optimizer built before the in-step norm reads its loss
  scale; `test_step_without`: the evaluation step without the norm metric's keys.
"""

import keras


def build_optimizer(optimizer, trainable_variables):
    """Builds `optimizer` for `trainable_variables` if needed, as its `apply` would on the first step.

    The in-step gradient norm reads the loss scale before `apply`, and a LossScaleOptimizer only
    creates its `dynamic_scale` when built.
    """
    if not optimizer.built and trainable_variables is not None:
        with keras.name_scope(optimizer.name):
            optimizer.build(list(trainable_variables))
        optimizer.built = True


def values_before_step(model, args, variables):
    """Copies of the values of `variables` (Keras variables) before the step `train_step(*args)` runs.

    TensorFlow and PyTorch steps read and write the variables themselves, so the values are copied
    before the step changes them. `model` and `args` are unused here (the JAX step reads its state).
    """
    del model, args
    return [keras.ops.copy(v.value) for v in variables]


def metric_values_before_step(model, args, variables):
    """Copies of metric variables' values before the step (TensorFlow, PyTorch: read them now)."""
    return values_before_step(model, args, variables)


def test_step_without(metric, step_cls, model):
    """The class's `test_step(data)` with the norm metric's keys dropped from its logs (evaluation has
    no gradients, so no norm)."""

    def test_step(data):
        logs = dict(step_cls.test_step(model, data))
        for key in metric.result_names():
            logs.pop(key, None)
        return logs

    return test_step


def plain_train_step(metric, step_cls, model):
    """The class's `train_step(data)`, untouched; its logs get the norm metric's keys (its current
    result) only where that step does not report the model's metrics."""

    def train_step(data):
        logs = step_cls.train_step(model, data)
        if any(key not in logs for key in metric.result_names()):
            logs = {**logs, **metric.result()}
        return logs

    return train_step


def quiet_train_step(metric, step_cls, model):
    """The class's `train_step(*args)` (TensorFlow: `(data)`; JAX: `(state, data)`), untouched: `metric`
    reports nothing while it is traced (`quiet`), so the compiled step is the untracked model's, without
    the metric's means (they cost the step time on TensorFlow, and kernels and per-step conversions on
    JAX); `gradkit.monitor` adds the metric's keys to its logs on the host
    (`GradientNormMetric.complete`)."""

    def train_step(*args):
        with metric.quiet():
            return step_cls.train_step(model, *args)

    train_step.quiet = True
    return train_step
