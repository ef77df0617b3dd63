"""What the TensorFlow and PyTorch backends share: data-parallel hooks (they have no
`keras.distribution` support), building the optimizer before the in-step norm reads its loss scale, and
reading variables before a training step (their `train_step(data)` reads the variables themselves); and,
for JAX too, the plain step of the steps that record nothing (`quiet_train_step`, TF and JAX) and what
the half-batch split asks of the loss (`mean_reduced`)."""

import contextlib

import keras

from gradkit import _keras_internals


def batch_multiple():
    """Rows per batch must be a multiple of this (1: no data parallelism on this backend)."""
    _refuse_distribution()
    return 1


def bind_all_but_x(call):
    """`call.bind` of a compiled forward: `bind(trainable, non_trainable, y, weights)` returns
    `lambda x: call(trainable, non_trainable, x, y, weights)` (where a call costs no Python to speak
    of, TensorFlow and JAX)."""

    def bind(trainable, non_trainable, y, weights):
        return lambda x: call(trainable, non_trainable, x, y, weights)

    return bind


def distribute_batch(structure):
    """No-op; raises NotImplementedError when a `keras.distribution` is active."""
    _refuse_distribution()
    return structure


def _refuse_distribution():
    if keras.distribution.distribution() is not None:
        raise NotImplementedError(
            "gradkit runs data-parallel only on the JAX backend: Keras' distribution API "
            f"(keras.distribution) is not supported on {keras.backend.backend()} (TensorFlow's is a "
            "prototype, PyTorch has none), and gradkit will not silently run on one device. Use "
            "KERAS_BACKEND=jax, or call keras.distribution.set_distribution(None)."
        )


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


def stateless_call(model, trainable, non_trainable, *args, **kwargs):
    """`model.stateless_call(trainable, non_trainable, *args, **kwargs)`: every layer reads the values
    given (on PyTorch, wrapped `torch.nn.Module`s too)."""
    return model.stateless_call(trainable, non_trainable, *args, **kwargs)


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
    the metric's means (measured on TensorFlow: a 1M-weight MLP's step 1.04x the untracked one with
    them; on JAX 11 more kernels, and arrays Keras' callbacks convert every step); `gradkit.monitor`
    adds the metric's keys to its logs on the host (`GradientNormMetric.complete`)."""

    def train_step(*args):
        with metric.quiet():
            return step_cls.train_step(model, *args)

    train_step.quiet = True
    return train_step


def mean_reduced(loss):
    """Whether a compiled loss (a name, a function, a `keras.losses.Loss`) averages over the batch rows
    (the half-batch gradient split of `_jax_split` and `_torch_split` is exact only then)."""
    if isinstance(loss, str) or (callable(loss) and not isinstance(loss, keras.losses.Loss)):
        return True  # wrapped by Keras with its default reduction
    return getattr(loss, "reduction", None) == "sum_over_batch_size"


def quiet_retracing():
    """No retracing warnings to silence on this backend: a do-nothing context manager."""
    return contextlib.nullcontext()


def set_random_seed(seed):
    """Seeds Keras, Python and numpy (JAX: its keys come from Keras' seed) without importing TensorFlow."""
    _keras_internals.set_keras_seed(int(seed))


def xla_determinism():
    """JAX's `enable_determinism`: JAX on CPU is deterministic already (None). On a GPU, XLA's
    deterministic ops need `XLA_FLAGS=--xla_gpu_deterministic_ops=true` before JAX starts: returns a
    message saying so when the flag is missing (it cannot be turned on in a running process)."""
    import os

    import jax

    if jax.default_backend() == "cpu" or "--xla_gpu_deterministic_ops=true" in os.environ.get(
        "XLA_FLAGS", ""
    ):
        return None
    return (
        f"JAX on {jax.default_backend()} has deterministic ops only with XLA_FLAGS="
        "--xla_gpu_deterministic_ops=true set before the process starts; a rerun may differ in the "
        "last digits."
    )
