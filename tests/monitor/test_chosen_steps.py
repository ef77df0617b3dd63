"""`every_n_steps` and gradient accumulation: the steps that record nothing run the class's own training
step (`gradkit.monitor._chosen_steps`), chosen on the host; the values keep their semantics."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import gradkit
from gradkit.monitor import _tracking, track_gradient_norm, untrack_gradient_norm
from gradkit.monitor._chosen_steps import ChosenTrainFunction
from helpers.training import LOSS, X, Y, fit, mlp


class BatchLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.values = []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(float(logs["grad_norm"]))


def counted(model):
    """Builds `model`'s training function and records which of its two functions each step runs."""
    function = model.make_train_function()
    assert isinstance(function, ChosenTrainFunction)
    calls = []
    for name in ("plain", "tracked"):
        inner = getattr(function, name)

        def call(*args, inner=inner, name=name):
            calls.append(name)
            return inner(*args)

        setattr(function, name, call)
    return calls


def test_only_recorded_steps_run_the_tracked_step_across_epochs_and_fits(monkeypatch):
    model = mlp(keras.optimizers.SGD(0.0))  # weights fixed: step i's norm is its batch's
    b = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    track_gradient_norm(model, include=("norm", "health"), every_n_steps=3)
    calls, logs, states = counted(model), BatchLogs(), []
    step_state = _tracking.step_state
    monkeypatch.setattr(_tracking, "step_state", lambda *a: states.append(1) or step_state(*a))
    history = fit(model, X, Y, logs, batch_size=2, epochs=2)  # optimizer steps 0-7: 0, 3, 6 recorded
    assert calls == ["tracked", "plain", "plain", "tracked", "plain", "plain", "tracked", "plain"]
    # The tracked step's Python runs once per call on PyTorch, once per trace on TensorFlow and JAX.
    assert len(states) == (3 if keras.backend.backend() == "torch" else 1)
    # The running mean of the epoch's recorded steps; before any, the last recorded value.
    expected = [b[0], b[0], b[0], (b[0] + b[3]) / 2, b[3], b[3], b[2], b[2]]
    np.testing.assert_allclose(logs.values, expected, rtol=1e-5)
    assert sorted(history) == ["grad_max", "grad_nonfinite", "grad_norm", "grad_zero_fraction", "loss"]
    calls.clear()
    history = fit(model, X, Y, logs, batch_size=2)  # steps 8-11: 9 recorded (batch 1)
    assert calls == ["plain", "tracked", "plain", "plain"]
    assert history["grad_norm"][0] == pytest.approx(b[1], rel=1e-5)


class AllLogs(keras.callbacks.Callback):
    def __init__(self, names):
        super().__init__()
        self.names, self.rows = names, []

    def on_train_batch_end(self, batch, logs=None):
        self.rows.append([float(logs[name]) for name in self.names])


def test_skipped_steps_log_the_last_recorded_values_of_every_key():
    model = mlp(keras.optimizers.SGD(0.0))  # weights fixed: step i's norm is its batch's
    b = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    track_gradient_norm(model, include="all", every_n_steps=3)
    names = _tracking.tracked_metric(model).names
    calls, logs = counted(model), AllLogs(names)
    history = fit(model, X, Y, logs, batch_size=2, epochs=2)  # optimizer steps 0-7: 0, 3, 6 recorded
    assert calls == ["tracked", "plain", "plain", "tracked", "plain", "plain", "tracked", "plain"]
    rows = np.asarray(logs.rows)
    # A skipped step logs what the last recorded step logged (the running means it leaves unchanged);
    # after the epoch's reset, before its first recorded step, the last recorded step's own values.
    for skipped, source in [(1, 0), (2, 0), (5, 4), (7, 6)]:
        np.testing.assert_array_equal(rows[skipped], rows[source])
    grad_norm = rows[:, names.index("grad_norm")]
    np.testing.assert_allclose(
        grad_norm, [b[0], b[0], b[0], (b[0] + b[3]) / 2, b[3], b[3], b[2], b[2]], rtol=1e-5
    )
    assert np.all(grad_norm > 0.0)  # never a made-up 0
    assert history["grad_norm"] == pytest.approx([(b[0] + b[3]) / 2, b[2]], rel=1e-5)


def step_graph(function, data):
    """The graph of the one-step `tf.function` inside a training function Keras' TensorFlow trainer made."""
    import inspect

    one_step = inspect.getclosurevars(function).nonlocals["one_step_on_data"]
    return one_step.__wrapped__.get_concrete_function(data).graph  # under Keras' Optional unwrapping


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's traced graphs")
def test_tensorflow_plain_step_returns_what_the_class_step_returns():
    import collections

    import tensorflow as tf

    data = (tf.zeros((2, 4)), tf.zeros((2,), "int64"))
    untracked = mlp(keras.optimizers.SGD(0.0))
    untracked.make_train_function()
    expected = step_graph(untracked.train_function, data)
    model = mlp(keras.optimizers.SGD(0.0))
    track_gradient_norm(model, include="all", every_n_steps=3)
    function = model.make_train_function()
    plain, tracked = step_graph(function.plain, data), step_graph(function.tracked, data)
    # The skipped step's graph is the untracked model's: the metric's variables are not even read.
    kinds = [collections.Counter(op.type for op in g.get_operations()) for g in (expected, plain)]
    assert kinds[0] == kinds[1] and len(plain.get_operations()) == len(expected.get_operations())
    assert sorted(plain.structured_outputs) == sorted(expected.structured_outputs) == ["loss"]
    assert len(tracked.get_operations()) > len(plain.get_operations())  # the tracked one records
    assert "grad_norm" in tracked.structured_outputs


def jax_program(model, function):
    """The compiled program (XLA) of Keras' jitted JAX training step inside `function`, and its logs' keys."""
    import collections
    import inspect
    import re

    import jax

    jitted = inspect.getclosurevars(function).nonlocals["step_function"]
    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables)
    state = tuple([v.value for v in group] for group in (*groups, model.metrics_variables))
    data = (jax.numpy.zeros((2, 4)), jax.numpy.zeros((2,), "int32"))
    logs = jax.eval_shape(jitted, state, data)[0]
    text = jitted.lower(state, data).compile().as_text()
    return collections.Counter(re.findall(r"= \S+ (\w[\w-]*)\(", text)), sorted(logs)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's compiled programs")
def test_jax_plain_step_computes_what_the_class_step_computes():
    untracked, model = mlp(keras.optimizers.SGD(0.0)), mlp(keras.optimizers.SGD(0.0))
    track_gradient_norm(model, include="all", every_n_steps=3)
    for m in (untracked, model):
        fit(m, X, Y, batch_size=2, epochs=1)  # builds the optimizers and the training functions
    expected, keys = jax_program(untracked, untracked.train_function)
    plain, plain_keys = jax_program(model, model.train_function.plain)
    # The metric's variables pass through (parameters, aliased outputs); nothing of it is computed.
    plain["parameter"] -= len(model.metrics_variables) - len(untracked.metrics_variables)
    assert plain == expected and plain_keys == keys == ["loss"]
    assert "grad_norm" in jax_program(model, model.train_function.tracked)[1]


def test_gradient_accumulation_runs_the_tracked_step_on_recorded_updates_only():
    model = mlp(keras.optimizers.SGD(0.0, gradient_accumulation_steps=2))
    g = [gradkit.weight_gradients(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    applied = [[(a + c) / 2 for a, c in zip(g[i], g[i + 1])] for i in (0, 2)]
    norms = [np.sqrt(sum(float(np.sum(np.square(t, dtype=np.float64))) for t in u)) for u in applied]
    track_gradient_norm(model, include="all", every_n_steps=3)
    calls, logs = counted(model), BatchLogs()
    fit(model, X, Y, logs, batch_size=2, epochs=2)  # updates after steps 1, 3, 5, 7: 1 and 7 recorded
    assert calls == ["plain", "tracked", "plain", "plain", "plain", "plain", "plain", "tracked"]
    assert np.isnan(logs.values[0])  # nothing applied yet
    np.testing.assert_allclose(logs.values[1:], [norms[0]] * 6 + [norms[1]], rtol=1e-5)


def test_train_on_batch_reads_the_optimizer_counter_each_call():
    model = mlp(keras.optimizers.SGD(0.0))
    b = [gradkit.gradient_norm(model, X[i : i + 4], Y[i : i + 4]) for i in (0, 4)]
    track_gradient_norm(model, every_n_steps=2)
    calls = counted(model)
    values = [model.train_on_batch(X[i : i + 4], Y[i : i + 4], return_dict=True) for i in (0, 4, 4)]
    values = [logs["grad_norm"] for logs in values]
    np.testing.assert_allclose(values, [b[0], b[0], b[1]], rtol=1e-5)  # iterations 0 and 2 recorded
    model.optimizer.iterations.assign(0)  # the counter is the optimizer's, read at each call
    assert model.train_on_batch(X[4:], Y[4:], return_dict=True)["grad_norm"] == pytest.approx(b[1], rel=1e-5)
    assert calls == ["tracked", "plain", "tracked", "tracked"]


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="PyTorch has steps_per_execution=1 only")
def test_steps_per_execution_runs_the_tracked_step_on_calls_with_a_recorded_step():
    model = mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=LOSS, steps_per_execution=2)
    x, y = np.concatenate([X, X]), np.concatenate([Y, Y])
    b = [gradkit.gradient_norm(model, x[i : i + 2], y[i : i + 2]) for i in range(0, 16, 2)]
    track_gradient_norm(model, every_n_steps=3)
    if keras.backend.backend() == "jax":  # JAX: the tracked step every step (traced conditional)
        calls = None
        model.make_train_function()
        assert not isinstance(model.train_function, ChosenTrainFunction)
    else:  # TensorFlow reads the counter before each call of two steps
        calls = counted(model)
    history = fit(model, x, y, batch_size=2)  # steps 0, 3 and 6 recorded: calls 0, 1 and 3
    assert calls in (None, ["tracked", "tracked", "plain", "tracked"])
    assert history["grad_norm"][0] == pytest.approx((b[0] + b[3] + b[6]) / 3, rel=1e-5)


def test_loss_scale_optimizer_steps_are_read_not_counted():
    model = mlp(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.0)))
    b = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    track_gradient_norm(model, include="all", every_n_steps=3)
    if keras.backend.backend() == "jax":  # a skipped step is known only inside the step
        calls = None
        model.make_train_function()
        assert not isinstance(model.train_function, ChosenTrainFunction)
    else:
        calls = counted(model)
    history = fit(model, X, Y, batch_size=2)  # no overflow: steps 0 and 3 recorded
    assert calls in (None, ["tracked", "plain", "plain", "tracked"])
    assert history["grad_norm"][0] == pytest.approx((b[0] + b[3]) / 2, rel=1e-5)


def test_untrack_restores_keras_make_train_function():
    model = mlp(keras.optimizers.SGD(0.0))
    track_gradient_norm(model, every_n_steps=2)
    fit(model, X, Y, batch_size=4)
    assert isinstance(model.train_function, ChosenTrainFunction)
    untrack_gradient_norm(model)
    assert "make_train_function" not in vars(model)
    history = fit(model, X, Y, batch_size=4)
    assert "grad_norm" not in history and not isinstance(model.train_function, ChosenTrainFunction)


DATA_PARALLEL = r"""
import numpy as np, keras, gradkit, jax
from gradkit.monitor._chosen_steps import ChosenTrainFunction
assert len(jax.devices()) == 2, jax.devices()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(3)])
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss)
x, y = np.random.RandomState(0).randn(8, 4).astype("float32"), np.arange(8) % 3
b = [gradkit.gradient_norm(model, x[i : i + 2], y[i : i + 2]) for i in range(0, 8, 2)]
gradkit.track_gradient_norm(model, include="all", every_n_steps=3)
seen = []
log = keras.callbacks.LambdaCallback(on_train_batch_end=lambda i, logs: seen.append(float(logs["grad_norm"])))
model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[log])
assert isinstance(model.train_function, ChosenTrainFunction)
np.testing.assert_allclose(seen, [b[0], b[0], b[0], (b[0] + b[3]) / 2], rtol=1e-5)
print("OK")
"""


@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="keras.distribution data parallelism is JAX-only"
)
def test_jax_data_parallel_runs_the_plain_step_on_steps_that_record_nothing():
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    done = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK" in done.stdout
