"""PyTorch backend: autograd (`torch.autograd.grad`) through TorchScript traces where they are exact.

`torch.compile` was measured at 71 s to compile and then 2.8x slower than eager on a 2-core CPU. gradkit
instead replays each input signature's `torch.jit.trace` of the pure function (see `_torch_trace`: a
trace is kept only where it reproduces the eager call exactly, else that signature runs eagerly) and
counts distinct input signatures as its "traces".
"""

import math

import numpy as np
import torch
from keras import tree

from gradkit import _keras_internals
from gradkit.backend import _torch_stats, _torch_train_step
from gradkit.backend._common import (  # noqa: F401
    batch_multiple,
    build_optimizer,
    distribute_batch,
    plain_train_step,
    quiet_retracing,
    test_step_without,
    values_before_step,
)
from gradkit.backend._norm_values import applied_norms, divide_norms, norm_adder, norm_means  # noqa: F401
from gradkit.backend._torch_misc import *  # noqa: F403 - compile_search, seed_state, uniform, determinism
from gradkit.backend._torch_modules import stateless_call  # noqa: F401
from gradkit.backend._torch_trace import Traced, compile_forward, flatten, signature  # noqa: F401
from gradkit.errors import DisconnectedGradientError

ROW_QUANTUM = 32  # rows of a call are padded to a multiple of this (a new trace costs milliseconds here)
EAGER = True
# On CPU the in-step norms are summed on the host (`group_norms`); False: in tensors, as on an accelerator.
_HOST_ON_CPU = True

# Autograd nodes whose derivative is zero: a loss that reaches its inputs only through them does not
# depend on them (argmax-like steps already give a loss without `grad_fn`).
_ZERO_DERIVATIVE = ("RoundBackward", "FloorBackward", "CeilBackward", "SignBackward", "TruncBackward")


def to_tensor(array):
    """`keras.ops.convert_to_tensor(array)` for a numpy array: zero-copy on the CPU, on Keras' device."""
    device = _keras_internals.torch_device()
    if str(device) == "cpu" and isinstance(array, np.ndarray) and array.flags.c_contiguous:
        return torch.from_numpy(array if array.flags.writeable else array.copy())
    return torch.as_tensor(array, device=device)


def to_numpy(tensor):
    """`keras.ops.convert_to_numpy(tensor)` (bfloat16, which numpy lacks, as float32)."""
    tensor = tensor.detach()
    return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).cpu().numpy()


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


def compile_grad(fn, wrt, per_output=False, has_aux=False):
    """Wrap `fn(trainable, non_trainable, x, y, sample_weight)` to return it and its gradient.

    With `has_aux`, `fn` returns `(loss, aux)` and the call returns `((loss, aux), grads)`.
    """
    checked, traced = set(), Traced(fn)

    def call(trainable, non_trainable, x, y, sample_weight):
        if wrt == "x":
            x = tree.map_structure(lambda t: t.detach().requires_grad_(True), x)
            target = x
        else:
            target = trainable
        flat = tree.flatten(target)
        key = signature(x, y, sample_weight)
        call.trace_count += key not in traced
        with torch.enable_grad():
            out = traced(key, trainable, non_trainable, x, y, sample_weight)
        loss = out[0] if has_aux else out
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
        value = loss.detach()
        if has_aux:
            value = (value, tree.map_structure(lambda t: t.detach(), out[1]))
        return value, tree.pack_sequence_as(target, grads)

    call.trace_count, call.traced = 0, traced
    return call


def compile_step(objective, update, jit_compile=False):
    """One attack step: `call(trainable, non_trainable, state, fixed) -> state`.

    The gradient of `objective(trainable, non_trainable, x, y, weights) -> (loss, aux)` w.r.t.
    `x = state["x"]` comes from `compile_grad` (its traces, its checks); `update(state, aux, grad,
    fixed)` then runs eagerly under `torch.no_grad` on the device's tensors (torch.compile, what
    Keras' `jit_compile` means on PyTorch, measured slower on CPU, see the module docstring: the
    argument has no effect). `trace_count` is that of the gradient.
    """
    del jit_compile
    grad_fn = compile_grad(objective, "x", has_aux=True)

    def call(trainable, non_trainable, state, fixed):
        (_, aux), grad = grad_fn(trainable, non_trainable, state["x"], fixed["y"], fixed["weights"])
        call.trace_count = grad_fn.trace_count
        with torch.no_grad():
            return update(state, aux, grad, fixed)

    call.trace_count, call.traced = 0, grad_fn.traced
    return call


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])` for `grads` that need no autograd graph.

    One BLAS dot per gradient on a flat view (no copy). On CPU the rest is plain Python on a few
    numbers: each square comes to the host with `item()`, and the result is a list of Python floats
    (float64 sums). Right after a training step's kernels every small tensor operation costs 10-40 us
    (measured in the step; numpy's too), so a tensor result's stack, product, square root, metric
    update and metric result took about 180 us a step after the dots' 250-300 us, for a 1M-weight
    MLP; the Python arithmetic takes about 20 us. On an accelerator, where `item()` would wait for
    the device, the result is a float32 tensor computed there.
    """
    squares = []
    for g in grads:
        g = g if g.dtype == torch.float32 else g.float()
        g = g if g.ndim == 1 else g.reshape(-1)
        squares.append(torch.dot(g, g))
    if _HOST_ON_CPU and matrix.device.type == "cpu":
        host = [square.item() for square in squares]
        host.append(last.item() if isinstance(last, torch.Tensor) else float(last))
        return [math.sqrt(sum(host[k] for k in row)) for row in _rows(matrix)]
    if not isinstance(last, torch.Tensor):
        last = torch.as_tensor(last, dtype=torch.float32, device=matrix.device)
    squares.append(last)
    return torch.mv(matrix, torch.stack(squares)).sqrt_()


def _rows(matrix):  # the column indices of the ones in each row of the constant 0/1 `matrix`
    rows = getattr(matrix, "_gradkit_rows", None)
    if rows is None:
        rows = matrix._gradkit_rows = [torch.nonzero(row).flatten().tolist() for row in matrix]
    return rows


def _on_host():  # where the in-step values are summed on the host (see `group_norms`)
    return _HOST_ON_CPU and str(_keras_internals.torch_device()) == "cpu"


def weight_stats(grads, before, after, columns, shapes, clip=None, half=None):
    """The per-weight statistics (`_torch_stats`): a float64 numpy table on the CPU, else a tensor."""
    return _torch_stats.weight_stats(grads, before, after, columns, shapes, clip, host=_on_host(), half=half)


def cond(predicate, true_fn, size):
    """`true_fn()` if `predicate` (a Python bool: the step runs eagerly), else `size` zeros."""
    if predicate:
        return true_fn()
    return [0.0] * size if _on_host() else torch.zeros(size, device=_keras_internals.torch_device())


def assign_add(variable, value):
    """`variable += value` in place: `KerasVariable.assign` costs 20-30 us of checks per call."""
    with torch.no_grad():
        variable.value.add_(value)


add_norms = norm_adder(assign_add)


def _loss_scale(optimizer, trainable_variables):
    build_optimizer(optimizer, trainable_variables)
    if hasattr(optimizer, "dynamic_scale"):
        scale = optimizer.dynamic_scale.value.detach()
        return scale.item() if _HOST_ON_CPU and scale.device.type == "cpu" else scale  # as the norms
    return optimizer.loss_scale_factor  # None or a float


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`
    (`_torch_train_step`)."""
    return _torch_train_step.wrap_train_step(model, metric, norms_fn, _loss_scale)
