"""TensorFlow's core: one `tf.function` per loss, differentiated with `tf.GradientTape`; the attack
step's update as a nested XLA cluster; the capabilities of this backend."""

import keras
import tensorflow as tf

from gradkit.backend.common import core as common
from gradkit.backend.common.memory import out_of_memory_hint_for
from gradkit.backend.tensorflow import retracing
from gradkit.backend.tensorflow.dispatch import dispatcher
from gradkit.errors import DisconnectedGradientError

STEPS_RUN_EAGERLY = False
ROW_QUANTUM = None  # None: rows are padded to the batch size or the next power of two (traces are costly)
DATA_PARALLEL = False
UNSEEDED_LAYERS_DRAW_GLOBALLY = False
ITERATIONS_IN_STATE_ONCE_BUILT = False
COUNTER_READABLE_BETWEEN_CALLS = True

to_tensor = keras.ops.convert_to_tensor
to_numpy = keras.ops.convert_to_numpy
stateless_call = common.stateless_call
quiet_retracing = retracing.quiet_retracing
wrap_module = None  # torch.nn.Modules run on the PyTorch backend only


def variable_values(variables, differentiable=False):
    """The `tf.Variable`s behind Keras variables (read inside the graph at call time)."""
    del differentiable  # the tape only differentiates what it is asked for
    return [v.value for v in variables]


def _gradient(tape, loss, target):
    flat = tf.nest.flatten(target)
    grads = tape.gradient(loss, flat)
    if all(g is None for g in grads):
        raise DisconnectedGradientError(
            "The loss does not depend on the values it is differentiated with respect to "
            "(a step such as argmax, round or a comparison cuts the gradient)."
        )
    grads = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g) for t, g in zip(flat, grads)]
    return tf.nest.pack_sequence_as(target, grads)


def compile_grad(fn, wrt, per_output=False, has_aux=False):
    """Compile `fn(trainable, non_trainable, x, y, sample_weight)` and its gradient w.r.t. `wrt`.

    Args:
        fn: the pure loss function (returns a scalar, K losses with `per_output`, or `(loss, aux)`
            with `has_aux`).
        wrt: "x" or "trainable", what the gradient is taken with respect to.
        per_output: the gradients get a leading axis of size K, one backward pass per loss.
        has_aux: `fn` returns `(loss, aux)`.

    Returns:
        `call(trainable, non_trainable, x, y, sample_weight) -> (loss, grads)` (`((loss, aux), grads)`
        with `has_aux`), with a `trace_count`.
    """

    @tf.function(autograph=False)
    def value_and_grad(trainable, non_trainable, x, y, sample_weight):
        call.trace_count += 1
        target = x if wrt == "x" else trainable
        with tf.GradientTape(persistent=per_output, watch_accessed_variables=False) as tape:
            tape.watch(target)
            out = fn(trainable, non_trainable, x, y, sample_weight)
            loss = out[0] if has_aux else out
            parts = [loss[k] for k in range(loss.shape[0])] if per_output else None
        if not per_output:
            return out, _gradient(tape, loss, target)
        rows = [_gradient(tape, part, target) for part in parts]
        return out, tf.nest.map_structure(lambda *g: tf.stack(g), *rows)

    def call(*args):
        return value_and_grad(*args)

    call.trace_count = 0
    return call


def fused(fn):
    """`fn` (pure `keras.ops` on tensors) as one XLA cluster, to be called inside a `tf.function`.

    An attack's update is some twenty elementwise passes over the batch (select, step, projection,
    clip, records); run op by op, each allocates and writes a new batch-sized tensor, where XLA fuses
    them into a few loops over the batch. The model's forward and backward stay outside the cluster, on
    TensorFlow's kernels.
    """
    return tf.function(fn, autograph=False, jit_compile=True)


def compile_step(objective, update, jit_compile=False):
    """Compile one attack step: `call(trainable, non_trainable, state, fixed) -> state`.

    `objective(trainable, non_trainable, x, y, weights) -> (loss, aux)` is differentiated w.r.t.
    `x = state["x"]` (`y = fixed["y"]`, `weights = fixed["weights"]`), then `update(state, aux, grad,
    fixed)` gives the next state; both run inside one `tf.function`, so the state stays on the device.
    By default the model's forward and backward run on TensorFlow's own kernels (XLA on a CPU is slower
    for small CNNs) and the update in a nested XLA cluster (`fused`). With `jit_compile` (every member
    model's Keras `jit_compile`, which "auto" sets where a GPU is) the whole step is one XLA cluster:
    the backward's output then feeds the update without being written out.
    """
    inner = update if jit_compile else fused(update)

    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        x = state["x"]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            loss, aux = objective(trainable, non_trainable, x, fixed["y"], fixed["weights"])
        return inner(state, aux, _gradient(tape, loss, x), fixed)

    step = tf.function(traced, autograph=False, jit_compile=bool(jit_compile))
    fast = dispatcher(step)  # no per-call argument matching

    def call(*args):
        return fast(*args)

    call.trace_count = 0
    return call


def compile_forward(fn):
    """Compile `fn(trainable, non_trainable, x, y, weights)` without a gradient (one `tf.function`)."""

    @tf.function(autograph=False)
    def forward(*args):
        call.trace_count += 1
        return fn(*args)

    def call(*args):
        return forward(*args)

    call.trace_count, call.bind = 0, common.bind_all_but_x(call)
    return call


def set_random_seed(seed):
    """`keras.utils.set_random_seed`: Keras, Python, numpy and TensorFlow."""
    keras.utils.set_random_seed(int(seed))


def enable_determinism():
    """Deterministic TensorFlow ops from now on (`tf.config.experimental.enable_op_determinism`, with
    `keras.utils.set_random_seed` called by the caller); returns None (TensorFlow has them)."""
    tf.config.experimental.enable_op_determinism()
    return None


def is_out_of_memory(exc):
    """Whether `exc` is TensorFlow's out-of-memory error (`tf.errors.ResourceExhaustedError`)."""
    return isinstance(exc, tf.errors.ResourceExhaustedError)


out_of_memory_hint = out_of_memory_hint_for(is_out_of_memory)
