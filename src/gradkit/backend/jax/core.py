"""JAX's core: `jax.jit` over `jax.value_and_grad`, with every variable value passed as an argument; the
conversions, determinism and the capabilities of this backend."""

import os

import jax
import keras
import numpy as np

from gradkit.backend.common import core as common
from gradkit.backend.common.memory import out_of_memory_hint_for
from gradkit.backend.jax.connected import check_connected

STEPS_RUN_EAGERLY = False
ROW_QUANTUM = None  # None: rows are padded to the batch size or the next power of two (traces are costly)
DATA_PARALLEL = True
UNSEEDED_LAYERS_DRAW_GLOBALLY = False
ITERATIONS_IN_STATE_ONCE_BUILT = True
COUNTER_READABLE_BETWEEN_CALLS = False

to_tensor = keras.ops.convert_to_tensor
stateless_call = common.stateless_call
quiet_retracing = common.quiet_retracing
wrap_module = None  # torch.nn.Modules run on the PyTorch backend only
set_random_seed = common.set_random_seed


def to_numpy(tensor):
    """`keras.ops.convert_to_numpy(tensor)`; an array sharded over the devices of several processes (a
    `keras.distribution` mesh spanning a `jax.distributed` group) is gathered from all of them first:
    every process must then call it, in the same order."""
    if isinstance(tensor, keras.Variable):
        tensor = tensor.value
    if isinstance(tensor, jax.Array) and not tensor.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(tensor, tiled=True))
    return keras.ops.convert_to_numpy(tensor)


def variable_values(variables, differentiable=False):
    """The current values of Keras variables as JAX arrays."""
    del differentiable
    return [v.value for v in variables]


def compile_grad(fn, wrt, per_output=False, has_aux=False):
    """Compile `fn(trainable, non_trainable, x, y, sample_weight)` and its gradient w.r.t. `wrt`.

    Args:
        fn: the pure loss function (returns a scalar, K losses with `per_output`, or `(loss, aux)`
            with `has_aux`).
        wrt: "x" or "trainable", what the gradient is taken with respect to.
        per_output: the gradients get a leading axis of size K (`jax.jacrev`).
        has_aux: `fn` returns `(loss, aux)`.

    Returns:
        `call(trainable, non_trainable, x, y, sample_weight) -> (loss, grads)` (`((loss, aux), grads)`
        with `has_aux`), with a `trace_count`.
    """
    argnum = 2 if wrt == "x" else 0

    def traced(*args):
        call.trace_count += 1
        return fn(*args)

    def scalar(*args):
        return fn(*args)[0] if has_aux else fn(*args)

    if per_output:

        def value_and_grad(*args):
            return traced(*args), jax.jacrev(fn, argnums=argnum)(*args)

        compiled = jax.jit(value_and_grad)
    else:
        compiled = jax.jit(jax.value_and_grad(traced, argnums=argnum, has_aux=has_aux))
    checked = set()

    def call(*args):
        signature = jax.tree_util.tree_map(lambda a: (tuple(a.shape), str(a.dtype)), args)
        key = repr(signature)
        if key not in checked:
            check_connected(scalar, argnum, args)
            checked.add(key)
        return compiled(*args)

    call.trace_count = 0
    return call


def compile_step(objective, update, jit_compile=False):
    """Compile one attack step: `call(trainable, non_trainable, state, fixed) -> state`.

    `objective(trainable, non_trainable, x, y, weights) -> (loss, aux)` is differentiated w.r.t.
    `x = state["x"]` (`y = fixed["y"]`, `weights = fixed["weights"]`), then `update(state, aux, grad,
    fixed)` gives the next state; both run inside one `jax.jit`, so the state stays on the device
    (always XLA: `jit_compile` has no effect).
    """
    del jit_compile

    def step(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        grad_fn = jax.value_and_grad(objective, argnums=2, has_aux=True)
        (_, aux), grad = grad_fn(trainable, non_trainable, state["x"], fixed["y"], fixed["weights"])
        return update(state, aux, grad, fixed)

    compiled = jax.jit(step)
    checked = set()

    def call(trainable, non_trainable, state, fixed):
        key = tuple((tuple(a.shape), str(a.dtype)) for a in jax.tree_util.tree_leaves(state["x"]))
        if key not in checked:
            args = (trainable, non_trainable, state["x"], fixed["y"], fixed["weights"])
            check_connected(lambda *a: objective(*a)[0], 2, args)
            checked.add(key)
        return compiled(trainable, non_trainable, state, fixed)

    call.trace_count = 0
    return call


def compile_forward(fn):
    """Compile `fn(trainable, non_trainable, x, y, weights)` without a gradient (`jax.jit`)."""

    def traced(*args):
        call.trace_count += 1
        return fn(*args)

    compiled = jax.jit(traced)

    def call(*args):
        return compiled(*args)

    call.trace_count, call.bind = 0, common.bind_all_but_x(call)
    return call


def enable_determinism():
    """JAX on CPU is deterministic already (None). On a GPU, XLA's deterministic ops need
    `XLA_FLAGS=--xla_gpu_deterministic_ops=true` before JAX starts: returns a message saying so when the
    flag is missing (it cannot be turned on in a running process)."""
    if jax.default_backend() == "cpu" or "--xla_gpu_deterministic_ops=true" in os.environ.get(
        "XLA_FLAGS", ""
    ):
        return None
    return (
        f"JAX on {jax.default_backend()} has deterministic ops only with XLA_FLAGS="
        "--xla_gpu_deterministic_ops=true set before the process starts; a rerun may differ in the "
        "last digits."
    )


def is_out_of_memory(exc):
    """Whether `exc` is JAX's out-of-memory error: a `JaxRuntimeError` (`XlaRuntimeError`) with status
    `RESOURCE_EXHAUSTED`."""
    return isinstance(exc, jax.errors.JaxRuntimeError) and "RESOURCE_EXHAUSTED" in str(exc)


out_of_memory_hint = out_of_memory_hint_for(is_out_of_memory)
