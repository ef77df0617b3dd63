"""PyTorch's training steps: the step that records the diagnostics of the gradients it applies
(`wrap_train_step`), the plain step, the values before a step, and the inner attack of adversarial
training (see `gradkit.backend` and `gradkit.monitor`).

`wrap_train_step` replaces the optimizer's `apply` for the duration of `train_step(data)`: the capturing
apply runs the update, then hands the gradients and the loss scale to `norms_fn` and its values to the
metric, before the step's `compute_metrics` reads the metrics. With `norms_fn.needs_weights` it is called
`norms_fn(grads, scale, before, after)` with the trainable weights' values before and after the update
(copied only where `norms_fn.sampled()`); with `norms_fn.needs_halves` it gets the thunk of the halves'
gradient, from the step's own backward pass where the step can be split (`noise_scale.py`).
"""

import torch
from keras import tree

from gradkit.backend.common import train_steps
from gradkit.backend.torch import noise_scale
from gradkit.backend.torch.norms import loss_scale

plain_train_step = train_steps.plain_train_step
values_before_step = train_steps.values_before_step
metric_values_before_step = train_steps.metric_values_before_step


class Snapshot:
    """`snapshot(variables)`: copies of the variables' values in buffers kept across steps (a new large
    tensor each step costs its page faults)."""

    def __init__(self):
        self.buffers, self.key = None, None

    def __call__(self, variables):
        values = [v.value.detach() for v in variables]
        key = tuple((t.shape, t.dtype, t.device) for t in values)
        if key != self.key:
            self.buffers, self.key = [torch.empty_like(t) for t in values], key
        torch._foreach_copy_(self.buffers, values)
        return self.buffers


def _split_forward(model, step_cls, norms_fn, data):
    """The halves' gradients from the step's own backward pass where it is exact, else None."""
    if getattr(norms_fn, "needs_halves", False) and norms_fn.sampled():
        if noise_scale.splittable(model, step_cls, data):
            return noise_scale.SplitForward(model, model.trainable_variables)
    return None


def _apply_between_reads(model, metric, norms_fn, snapshot, apply, grads, trainable_variables, scale, extra):
    """The update between two reads of the weights, then the norms of the gradients and weights."""
    variables = list(trainable_variables or model.trainable_variables)
    taken = norms_fn.sampled()  # the update writes the weights in place: copies keep them
    before = snapshot(variables) if taken else None
    result = apply(grads, trainable_variables)
    after = [v.value.detach() for v in variables] if taken else None
    with torch.no_grad():
        metric.update_state(norms_fn(grads, scale, before, after, **extra))
    return result


def _capturing_apply(model, metric, norms_fn, data, split, snapshot):
    """The optimizer's `apply` for one step, recording the norms of the gradients it applies."""
    optimizer = model.optimizer
    apply = optimizer.apply

    def capturing_apply(grads, trainable_variables=None):
        grads = list(grads)
        scale = loss_scale(optimizer, trainable_variables)  # before the update changes it
        variables = trainable_variables or model.trainable_variables
        if split is not None:
            taken = split.finish(grads, tree.flatten(data)[0].shape[0])
            extra = {"halves": lambda: taken}
        else:
            extra = noise_scale.halves(model, data, norms_fn, variables, scale)
        if getattr(norms_fn, "needs_weights", False):
            args = (apply, grads, trainable_variables, scale, extra)
            return _apply_between_reads(model, metric, norms_fn, snapshot, *args)
        result = apply(grads, trainable_variables)
        # The norms after the update, which has just read the gradients: they are in the cache then.
        # Keras' optimizers write only variables, never gradients.
        with torch.no_grad():
            metric.update_state(norms_fn(grads, scale, **extra))  # before the step's compute_metrics
        return result

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
    step_cls, snapshot = type(model), Snapshot()

    def train_step(data):
        optimizer = model.optimizer
        split = _split_forward(model, step_cls, norms_fn, data)
        capturing_apply = _capturing_apply(model, metric, norms_fn, data, split, snapshot)
        # Not through the optimizer's __setattr__: its tracker would run in every step.
        object.__setattr__(optimizer, "apply", capturing_apply)
        try:
            if split is not None:
                with split:
                    logs = dict(step_cls.train_step(model, data))
            else:
                logs = dict(step_cls.train_step(model, data))
        finally:
            object.__delattr__(optimizer, "apply")
        if any(key not in logs for key in metric.result_names()):  # a train_step that skips the metrics
            logs.update(metric.result())
        return logs

    return train_step, train_steps.test_step_without(metric, step_cls, model)


def input_ascent(forward, loss_of, x, update, steps):
    """`steps` times `x <- update(x, d loss_of(forward(x)) / dx)`, eagerly with `torch.autograd.grad` w.r.t.
    `x` alone (the adversarial-training inner attack); the result is detached."""
    x = x.detach()
    for _ in range(steps):
        z = x.requires_grad_(True)
        with torch.enable_grad():
            loss = loss_of(forward(z))
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():
            x = update(z.detach(), grad).detach()
    return x
