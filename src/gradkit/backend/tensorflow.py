"""TensorFlow backend: one `tf.function` per loss, differentiated with `tf.GradientTape`."""

import keras
import tensorflow as tf

from gradkit.backend._common import (  # noqa: F401
    batch_multiple,
    bind_all_but_x,
    build_optimizer,
    distribute_batch,
    stateless_call,
    test_step_without,
    values_before_step,
)
from gradkit.backend._common import quiet_train_step as plain_train_step  # noqa: F401
from gradkit.backend._norm_values import applied_norms, divide_norms, norm_adder, norm_means  # noqa: F401
from gradkit.backend._search import tf_fused as fused_update
from gradkit.backend._search import tf_search as compile_search  # noqa: F401
from gradkit.backend._search import tf_seed_state as seed_state  # noqa: F401
from gradkit.backend._search import tf_uniform as uniform  # noqa: F401
from gradkit.backend._tf_dispatch import dispatcher
from gradkit.backend._tf_halves import half_gradients as _half_gradients
from gradkit.backend._tf_logging import quiet_retracing  # noqa: F401
from gradkit.backend._weight_stats import cond, stats_builder  # noqa: F401
from gradkit.errors import DisconnectedGradientError

ROW_QUANTUM = None  # None: rows are padded to the batch size or the next power of two (traces are costly)
EAGER = False


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

    With `has_aux`, `fn` returns `(loss, aux)` and the call returns `((loss, aux), grads)`.
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


def compile_step(objective, update, jit_compile=False):
    """Compile one attack step: `call(trainable, non_trainable, state, fixed) -> state`.

    `objective(trainable, non_trainable, x, y, weights) -> (loss, aux)` is differentiated w.r.t.
    `x = state["x"]` (`y = fixed["y"]`, `weights = fixed["weights"]`), then `update(state, aux, grad,
    fixed)` gives the next state; both run inside one `tf.function`, so the state stays on the device.
    By default the model's forward and backward run on TensorFlow's own kernels (XLA on CPU was 2x
    slower for small CNNs, KERAS3_NOTES) and the update in a nested XLA cluster (`fused_update`). With
    `jit_compile` (every member model's Keras `jit_compile`, which "auto" sets where a GPU is) the
    whole step is one XLA cluster: the backward's output then feeds the update without being written
    out (a near-free model's PGD step on the CPU: 4.4 ms against 6.2 ms, benchmarks/README.md).
    """
    inner = update if jit_compile else fused_update(update)

    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        x = state["x"]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            loss, aux = objective(trainable, non_trainable, x, fixed["y"], fixed["weights"])
        return inner(state, aux, _gradient(tape, loss, x), fixed)

    step = tf.function(traced, autograph=False, jit_compile=bool(jit_compile))
    fast = dispatcher(step)  # no per-call argument matching (0.4-0.8 ms a call)

    def call(*args):
        return fast(*args)

    call.trace_count = 0
    return call


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])`, float32 (dense gradients)."""
    # l2_loss (sum(t**2) / 2) is one kernel: measured 4x faster than reduce_sum(square) or a dot.
    squares = [2.0 * tf.nn.l2_loss(tf.cast(g, tf.float32)) for g in grads]
    squares.append(tf.cast(last, tf.float32))
    return tf.sqrt(tf.linalg.matvec(matrix, tf.stack(squares)))


weight_stats = stats_builder(lambda t: 2.0 * tf.nn.l2_loss(t))


def assign_add(variable, value):
    """`variable += value` (a Keras variable; inside a stateless scope, recorded there)."""
    variable.assign_add(value)


add_norms = norm_adder(assign_add)


def _loss_scale(optimizer, trainable_variables):
    build_optimizer(optimizer, trainable_variables)
    if hasattr(optimizer, "dynamic_scale"):
        return tf.convert_to_tensor(optimizer.dynamic_scale.value)
    return optimizer.loss_scale_factor  # None or a float


def wrap_train_step(model, metric, norms_fn):
    """Make `model.train_step` record the norms of the gradients it applies into `metric`."""
    step_cls = type(model)

    def train_step(data):
        optimizer = model.optimizer
        apply = optimizer.apply

        def halves(read, scale):  # {"halves": the halves' gradient thunk}; `read()`: weights before
            if not getattr(norms_fn, "needs_halves", False):
                return {}
            return {"halves": lambda: _half_gradients(model, data, read(), scale)}

        def capturing_apply(grads, trainable_variables=None):
            grads = list(grads)
            dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            if getattr(norms_fn, "needs_weights", False):
                return _apply_between_reads(apply, grads, trainable_variables, dense)
            scale = _loss_scale(optimizer, trainable_variables)
            variables = list(trainable_variables or model.trainable_variables)
            values = norms_fn(
                dense, scale, **halves(lambda: [tf.convert_to_tensor(v.value) for v in variables], scale)
            )
            metric.update_state(values)  # before the step's compute_metrics reads the metrics
            # The update runs after the norms have read the gradients, so that it may reuse their
            # buffers (TensorFlow forwards a buffer to an op only when nothing else still reads it).
            # Norms taken after the update cost 6-9% of a step of a 1M-weight MLP on 2 CPU cores;
            # this order, 0-4%.
            with tf.control_dependencies([values]):
                return apply(grads, trainable_variables)

        def _apply_between_reads(apply, grads, trainable_variables, dense):
            # The weights read before the update keep their values (TensorFlow copies a variable's
            # buffer on write while a read of it is alive); the reads after it see the new ones.
            variables = list(trainable_variables or model.trainable_variables)
            scale = _loss_scale(optimizer, trainable_variables)
            # `v.value` is the tf.Variable itself (read where it is used): convert_to_tensor reads it now.
            before = [tf.convert_to_tensor(v.value) for v in variables]
            result = apply(grads, trainable_variables)
            after = [tf.convert_to_tensor(v.value) for v in variables]
            metric.update_state(norms_fn(dense, scale, before, after, **halves(lambda: before, scale)))
            return result

        optimizer.apply = capturing_apply
        try:
            logs = dict(step_cls.train_step(model, data))
        finally:
            del optimizer.apply
        if any(key not in logs for key in metric.result_names()):  # a train_step that skips the metrics
            logs.update(metric.result())
        return logs

    return train_step, test_step_without(metric, step_cls, model)


def compile_forward(fn):
    """Compile `fn(trainable, non_trainable, x, y, weights)` without a gradient (one `tf.function`)."""

    @tf.function(autograph=False)
    def forward(*args):
        call.trace_count += 1
        return fn(*args)

    def call(*args):
        return forward(*args)

    call.trace_count, call.bind = 0, bind_all_but_x(call)
    return call


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


def set_random_seed(seed):
    """`keras.utils.set_random_seed`: Keras, Python, numpy and TensorFlow."""
    keras.utils.set_random_seed(int(seed))


def enable_determinism():
    """Deterministic TensorFlow ops from now on (`tf.config.experimental.enable_op_determinism`, with
    `keras.utils.set_random_seed` called by the caller); returns None (TensorFlow has them)."""
    tf.config.experimental.enable_op_determinism()
    return None
