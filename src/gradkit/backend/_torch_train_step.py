"""The PyTorch training step that records the diagnostics of the gradients it applies
(`wrap_train_step`; see `gradkit.backend` and `gradkit.monitor`)."""

import torch
from keras import tree

from gradkit.backend import _torch_split, _torch_stats
from gradkit.backend._common import test_step_without


def wrap_train_step(model, metric, norms_fn, loss_scale):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`;
    `loss_scale(optimizer, variables)`: the step's loss scale (None, a float or a tensor)."""
    step_cls, snapshot = type(model), _torch_stats.Snapshot()

    def train_step(data):
        optimizer = model.optimizer
        apply = optimizer.apply
        split = None  # the halves' gradients from the step's own backward pass (`_torch_split.py`)
        if getattr(norms_fn, "needs_halves", False) and norms_fn.sampled():
            if _torch_split.splittable(model, step_cls, data):
                split = _torch_split.SplitForward(model, model.trainable_variables)

        def capturing_apply(grads, trainable_variables=None):
            grads = list(grads)
            scale = loss_scale(optimizer, trainable_variables)  # before the update changes it
            variables = trainable_variables or model.trainable_variables
            if split is not None:
                taken = split.finish(grads, tree.flatten(data)[0].shape[0])
                extra = {"halves": lambda: taken}
            else:
                extra = _torch_stats.halves(model, data, norms_fn, variables, scale)
            if getattr(norms_fn, "needs_weights", False):
                return _apply_between_reads(apply, grads, trainable_variables, scale, extra)
            result = apply(grads, trainable_variables)
            # The norms after the update, which has just read the gradients: they are in the cache
            # then (measured 15% cheaper). Keras' optimizers write only variables, never gradients.
            with torch.no_grad():
                metric.update_state(norms_fn(grads, scale, **extra))  # before the step's compute_metrics
            return result

        def _apply_between_reads(apply, grads, trainable_variables, scale, extra):
            variables = list(trainable_variables or model.trainable_variables)
            taken = norms_fn.sampled()  # the update writes the weights in place: copies keep them
            before = snapshot(variables) if taken else None
            result = apply(grads, trainable_variables)
            after = [v.value.detach() for v in variables] if taken else None
            with torch.no_grad():
                metric.update_state(norms_fn(grads, scale, before, after, **extra))
            return result

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

    return train_step, test_step_without(metric, step_cls, model)
