"""PyTorch's core: autograd (`torch.autograd.grad`) through TorchScript traces where they are exact, the
conversions, seeding, determinism and the capabilities of this backend.

gradkit replays each input signature's `torch.jit.trace` of the pure function (`trace.py`: a trace is
kept only where it reproduces the eager call exactly, else that signature runs eagerly) and counts
distinct input signatures as its "traces"; `torch.compile` costs more than it saves on a CPU.
"""

import os

import numpy as np
import torch
from keras import tree

from gradkit import _keras_internals
from gradkit.backend.common import core as common
from gradkit.backend.common.memory import out_of_memory_hint_for
from gradkit.backend.torch import modules, trace
from gradkit.errors import DisconnectedGradientError

STEPS_RUN_EAGERLY = True
ROW_QUANTUM = 32  # rows of a call are padded to a multiple of this (a new trace costs milliseconds here)
DATA_PARALLEL = False
UNSEEDED_LAYERS_DRAW_GLOBALLY = True
ITERATIONS_IN_STATE_ONCE_BUILT = False
COUNTER_READABLE_BETWEEN_CALLS = True

compile_forward = trace.compile_forward
stateless_call = modules.stateless_call
wrap_module = modules.wrap_module
quiet_retracing = common.quiet_retracing

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


def _check_connected(loss, flat):
    if loss.grad_fn is None or not _reaches(loss, flat):
        raise DisconnectedGradientError(
            "The loss does not depend on the values it is differentiated with respect "
            "to (a step such as argmax, round or a comparison cuts the gradient)."
        )


def compile_grad(fn, wrt, per_output=False, has_aux=False):
    """Wrap `fn(trainable, non_trainable, x, y, sample_weight)` to return it and its gradient.

    Args:
        fn: the pure loss function (returns a scalar, K losses with `per_output`, or `(loss, aux)`
            with `has_aux`).
        wrt: "x" or "trainable", what the gradient is taken with respect to.
        per_output: the gradients get a leading axis of size K, one backward pass per loss.
        has_aux: `fn` returns `(loss, aux)`.

    Returns:
        `call(trainable, non_trainable, x, y, sample_weight) -> (loss, grads)` (`((loss, aux), grads)`
        with `has_aux`), detached, with a `trace_count` (input signatures) and its `traced`.
    """
    checked, traced = set(), trace.Traced(fn)

    def call(trainable, non_trainable, x, y, sample_weight):
        if wrt == "x":
            x = tree.map_structure(lambda t: t.detach().requires_grad_(True), x)
            target = x
        else:
            target = trainable
        flat = tree.flatten(target)
        key = trace.signature(x, y, sample_weight)
        call.trace_count += key not in traced
        with torch.enable_grad():
            out = traced(key, trainable, non_trainable, x, y, sample_weight)
        loss = out[0] if has_aux else out
        if key not in checked:
            _check_connected(loss, flat)
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
    fixed)` then runs eagerly under `torch.no_grad` on the device's tensors (`torch.compile`, what
    Keras' `jit_compile` means on PyTorch, is slower on a CPU: the argument has no effect).
    `trace_count` is that of the gradient.
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


def set_random_seed(seed):
    """Seeds Keras, Python, numpy and PyTorch (as `keras.utils.set_random_seed` does, without TensorFlow)."""
    common.set_random_seed(seed)
    torch.manual_seed(int(seed))


def enable_determinism():
    """Deterministic PyTorch algorithms from now on (`torch.use_deterministic_algorithms(True)`; on CUDA
    also `CUBLAS_WORKSPACE_CONFIG=:4096:8` when unset, which cuBLAS needs); returns None."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    return None


def is_out_of_memory(exc):
    """Whether `exc` is PyTorch's out-of-memory error: `torch.OutOfMemoryError`, or a `RuntimeError`
    whose message says "out of memory" (older releases, other devices)."""
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


out_of_memory_hint = out_of_memory_hint_for(is_out_of_memory)
