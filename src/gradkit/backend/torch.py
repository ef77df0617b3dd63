"""PyTorch backend: eager autograd (`torch.autograd.grad`); nothing is traced or compiled.

`torch.compile` was measured at 71 s to compile and then 2.8x slower than eager on a 2-core CPU, so
gradkit runs eagerly and counts distinct input signatures as its "traces".
"""

import math

import torch
from keras import tree

from gradkit.backend.single_device import batch_multiple, build_optimizer, distribute_batch  # noqa: F401
from gradkit.errors import DisconnectedGradientError

EAGER = True

# Autograd nodes whose derivative is zero: a loss that reaches its inputs only through them does not
# depend on them (argmax-like steps already give a loss without `grad_fn`).
_ZERO_DERIVATIVE = ("RoundBackward", "FloorBackward", "CeilBackward", "SignBackward", "TruncBackward")


def variable_values(variables, differentiable=False):
    """The current values of Keras variables; detached unless gradients w.r.t. them are wanted."""
    if differentiable:
        return [v.value.detach().requires_grad_(True) for v in variables]
    return [v.value.detach() for v in variables]


def _reaches(loss, leaves):
    """Whether the autograd graph of `loss` reaches any of `leaves` through non-zero derivatives."""
    targets = {id(t) for t in leaves}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or type(node).__name__.startswith(_ZERO_DERIVATIVE):
            continue
        seen.add(id(node))
        if id(getattr(node, "variable", None)) in targets:
            return True
        stack.extend(child for child, _ in node.next_functions)
    return False


def _gradient(loss, flat, retain):
    grads = torch.autograd.grad(loss, flat, allow_unused=True, retain_graph=retain)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(flat, grads)]


def compile_grad(fn, wrt, per_output=False):
    """Wrap `fn(trainable, non_trainable, x, y, sample_weight)` to return it and its gradient."""
    signatures, checked = set(), set()

    def call(trainable, non_trainable, x, y, sample_weight):
        if wrt == "x":
            x = tree.map_structure(lambda t: t.detach().requires_grad_(True), x)
            target = x
        else:
            target = trainable
        flat = tree.flatten(target)
        key = repr(tree.map_structure(lambda t: (tuple(t.shape), str(t.dtype)), (x, y)))
        if key not in signatures:
            signatures.add(key)
            call.trace_count += 1
        with torch.enable_grad():
            loss = fn(trainable, non_trainable, x, y, sample_weight)
        if key not in checked:
            if loss.grad_fn is None or not _reaches(loss, flat):
                raise DisconnectedGradientError(
                    "The loss does not depend on the values it is differentiated with respect "
                    "to (a step such as argmax, round or a comparison cuts the gradient)."
                )
            checked.add(key)
        if per_output:
            rows = [_gradient(loss[k], flat, True) for k in range(loss.shape[0])]
            grads = [torch.stack(g) for g in zip(*rows)]
        else:
            grads = _gradient(loss, flat, False)
        return loss.detach(), tree.pack_sequence_as(target, grads)

    call.trace_count = 0
    return call


def group_norms(grads, rows, last):
    """`[sqrt(sum(s[k] for k in row)) for row in rows]`, `s = [|g_1|^2, ..., |g_n|^2, last]`.

    For `grads` that need no autograd graph. One BLAS dot per gradient on a flat view (no copy).
    Right after a training step's kernels the first use of each kind of operation costs 20-40 us,
    numpy's included, against 3-5 us for the next ones (measured in the step), so on CPU everything
    after the dots is plain Python on a few numbers: the squares come to the host in one `tolist()`.
    Returns a list of Python floats on CPU; on an accelerator, where a host copy would wait for the
    device, a float32 tensor computed there.
    """
    squares = []
    for g in grads:
        g = g if g.dtype == torch.float32 else g.float()
        g = g if g.ndim == 1 else g.reshape(-1)
        squares.append(torch.dot(g, g))
    if squares and squares[0].device.type != "cpu":
        squares.append(torch.as_tensor(last, dtype=torch.float32, device=squares[0].device))
        stacked = torch.stack(squares)
        return torch.stack([stacked[list(row)].sum() for row in rows]).sqrt_()
    host = torch.stack(squares).tolist() if squares else []
    host.append(float(last))
    return [math.sqrt(sum(host[k] for k in row)) for row in rows]


def assign_add(variable, value):
    """`variable += value` in place: `KerasVariable.assign` costs 20-30 us of checks per call."""
    with torch.no_grad():
        variable.value.add_(value)


def _loss_scale(optimizer, trainable_variables):
    build_optimizer(optimizer, trainable_variables)
    if hasattr(optimizer, "dynamic_scale"):
        scale = optimizer.dynamic_scale.value.detach()
        return float(scale) if scale.device.type == "cpu" else scale  # host norms need a host scale
    return optimizer.loss_scale_factor  # None or a float


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`."""
    step_cls = type(model)

    def train_step(data):
        optimizer = model.optimizer
        apply = optimizer.apply

        def capturing_apply(grads, trainable_variables=None):
            grads = list(grads)
            scale = _loss_scale(optimizer, trainable_variables)  # before the update changes it
            result = apply(grads, trainable_variables)
            # The norms after the update, which has just read the gradients: they are in the cache
            # then (measured 15% cheaper). Keras' optimizers write only variables, never gradients.
            with torch.no_grad():
                metric.update_state(norms_fn(grads, scale))  # before the step's compute_metrics
            return result

        optimizer.apply = capturing_apply
        try:
            logs = dict(step_cls.train_step(model, data))
        finally:
            del optimizer.apply
        if any(key not in logs for key in metric.result_names()):  # a train_step that skips the metrics
            logs.update(metric.result())
        return logs

    def test_step(data):
        logs = dict(step_cls.test_step(model, data))
        for key in metric.result_names():
            logs.pop(key, None)
        return logs

    return train_step, test_step
