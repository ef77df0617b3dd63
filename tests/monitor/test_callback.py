"""`grad_norm` in the logs of `fit` and `train_on_batch` (`GradientNormCallback`, `track_gradient_norm`:
`gradkit.monitor._callback`, `_tracking`) equals `gradkit.gradient_norm` on the same weights and batch."""

import csv

import keras
import numpy as np
import pytest

import gradkit
from gradkit.monitor import GradientNormCallback, track_gradient_norm, untrack_gradient_norm
from gradkit.monitor import _step_norms as norms
from gradkit.monitor._step_norms import GradientNormMetric
from helpers.training import LOSS, X, Y, fit, mlp, regularized_unit, two_heads, unit_kernel

from conftest import set_weights_from


@pytest.mark.parametrize("weighted", [False, True])
def test_logged_value_is_the_norm_before_each_step_over_two_fits(weighted, norm_path):
    model = mlp(regularizer=keras.regularizers.L2(0.01) if weighted else None)
    weights = np.linspace(0.0, 2.0, len(X)).astype(np.float32) if weighted else None
    callback = GradientNormCallback(per_layer=True)
    for _ in range(2):  # one batch per epoch, two fit calls with one callback instance
        expected = gradkit.gradient_norm(model, X, Y, sample_weight=weights, per_layer=True)
        history = fit(model, X, Y, callback, sample_weight=weights)
        assert sorted(k for k in history if k.startswith("grad_norm")) == sorted(expected)
        for key, value in expected.items():
            assert history[key][0] == pytest.approx(value, rel=1e-5)
            assert callback.steps[key][-1] == [pytest.approx(value, rel=1e-5)]
    assert callback.epochs == [0, 0]
    # Each fit installs the tracking and removes it at its end: the model is left untracked.
    assert "grad_norm" not in [m.name for m in model.metrics] and "train_step" not in vars(model)
    assert "grad_norm" not in fit(model, X, Y)


def test_step_values_and_epoch_mean_nan_passes_through(norm_path):
    model = mlp(keras.optimizers.SGD(0.0))  # weights never change: each step's norm is its batch's
    batches = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    callback = GradientNormCallback()
    history = fit(model, X, Y, callback, batch_size=2, epochs=2)
    np.testing.assert_allclose(callback.steps["grad_norm"], [batches, batches], rtol=1e-5)
    np.testing.assert_allclose(history["grad_norm"], [np.mean(batches)] * 2, rtol=1e-5)
    y_nan = np.zeros((8, 3), np.float32)
    y_nan[7, 1] = np.nan  # a NaN target in the last batch (even lr=0 makes the weights NaN after it)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    history = fit(model, X, y_nan, callback, batch_size=2)
    steps = callback.steps["grad_norm"][-1]
    assert np.isfinite(steps[:3]).all() and np.isnan(steps[3])
    assert np.isnan(history["grad_norm"][0])


def test_step_values_of_a_long_epoch_and_validation():
    model = unit_kernel()  # kernel 1, SGD(0), mse: one sample x with target 0 has gradient 2 x^2
    x = np.linspace(0.5, 2.0, 150, dtype=np.float32)[:, None]
    y = np.zeros_like(x)
    callback = GradientNormCallback()
    history = fit(model, x, y, callback, batch_size=1, epochs=2, validation_data=(x[:2], y[:2]))
    np.testing.assert_allclose(callback.steps["grad_norm"], [2 * x[:, 0] ** 2] * 2, atol=2e-7 * 150 * 8)
    np.testing.assert_allclose(
        history["grad_norm"], [np.mean(2 * x[:, 0].astype(np.float64) ** 2)] * 2, rtol=1e-5
    )


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="steps_per_execution must be 1 on torch")
def test_steps_per_execution_gives_the_mean_of_each_call():
    model = unit_kernel()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", steps_per_execution=2)
    x = np.linspace(0.5, 2.0, 6, dtype=np.float32)[:, None]
    callback = GradientNormCallback()
    fit(model, x, np.zeros_like(x), callback, batch_size=1)
    np.testing.assert_allclose(
        callback.steps["grad_norm"], [(2 * x[:, 0] ** 2).reshape(3, 2).mean(1)], rtol=1e-6
    )


def test_one_sgd_step_applies_the_regularization_gradient():
    model = regularized_unit()
    history = fit(
        model, np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32), GradientNormCallback(True)
    )
    assert history["grad_norm"][0] == pytest.approx(np.sqrt(5.0), rel=1e-6)
    assert history["grad_norm/d"][0] == pytest.approx(np.sqrt(5.0), rel=1e-6)
    np.testing.assert_allclose(model.get_weights()[0], [[0.0], [0.0]], atol=1e-7)  # moved by [1, 2]


@pytest.mark.parametrize("weights, expected", [(None, 5.0), ([1.0, 0.0], 1.0), ([0.0, 0.0], 0.0)])
def test_sample_weights_in_fit(weights, expected):
    model = unit_kernel()
    x, y = np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32)
    w = None if weights is None else np.asarray(weights, np.float32)
    history = fit(model, x, y, GradientNormCallback(), sample_weight=w)
    assert history["grad_norm"][0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_head_without_a_loss_logs_zero_in_fit():
    model = two_heads()
    x, y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), np.ones((4, 2), np.float32)
    expected = gradkit.gradient_norm(model, x, {"head_a": y}, per_layer=True)
    history = fit(model, x, {"head_a": y, "head_b": y}, GradientNormCallback(per_layer=True))
    assert history["grad_norm/head_b"] == [0.0]
    assert history["grad_norm"][0] == pytest.approx(expected["grad_norm/head_a"], rel=1e-5)


@pytest.mark.parametrize(
    "name",
    ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Lion", "Ftrl", "Lamb"],
)
def test_every_keras_optimizer_leaves_the_logged_gradient_intact(name):
    # PyTorch takes the norms after the update: no optimizer may have changed the gradients in place.
    options = {"momentum": 0.9} if name == "SGD" else {}
    model = mlp(getattr(keras.optimizers, name)(0.1, **options))
    expected = gradkit.gradient_norm(model, X, Y)
    before = model.get_weights()[0].copy()
    history = fit(model, X, Y, GradientNormCallback())
    assert history["grad_norm"][0] == pytest.approx(expected, rel=1e-5)
    assert not np.allclose(model.get_weights()[0], before)  # the step did update the weights


@pytest.mark.parametrize("clip", ["clipnorm", "global_clipnorm"])
def test_norm_is_taken_before_clipping(clip):
    model = mlp(keras.optimizers.SGD(1.0, **{clip: 1e-3}))
    before = [w.copy() for w in model.get_weights()]
    expected = gradkit.gradient_norm(model, X, Y)
    history = fit(model, X, Y, GradientNormCallback())
    assert expected > 0.1 and history["grad_norm"][0] == pytest.approx(expected, rel=1e-5)
    steps = [b - a for a, b in zip(model.get_weights(), before)]  # lr * clipped gradient
    if clip == "global_clipnorm":
        assert np.sqrt(sum(np.sum(s**2) for s in steps)) == pytest.approx(1e-3, rel=1e-4)
    else:
        assert max(np.linalg.norm(s) for s in steps) == pytest.approx(1e-3, rel=1e-4)


def test_mixed_float16_removes_the_loss_scale(norm_path):
    reference = mlp()
    expected = gradkit.gradient_norm(reference, X, Y)
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = mlp()
    finally:
        keras.config.set_dtype_policy("float32")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    history = fit(model, X, Y, GradientNormCallback())
    scale = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale.value))
    assert scale > 1000.0
    assert history["grad_norm"][0] == pytest.approx(expected, rel=1e-3)


def test_a_fixed_loss_scale_factor_is_removed():
    expected = gradkit.gradient_norm(mlp(), X, Y)
    model = mlp(keras.optimizers.SGD(0.1, loss_scale_factor=64.0))
    history = fit(model, X, Y, GradientNormCallback())
    assert history["grad_norm"][0] == pytest.approx(expected, rel=1e-5)


def test_in_step_norms_by_hand(norm_path):
    # Groups: layer 1 owns weight 0, layer 2 weights 1 and 2; weight 1 has no gradient. |g0|^2 = 4,
    # |g2|^2 = 9 + 16 = 25, the loss scale 2 divides every norm, and the last entry is the weight 1.
    values = norms.NormValues([[0], [1, 2]])
    grads = [keras.ops.ones((2, 2)), None, keras.ops.convert_to_tensor([3.0, 4.0])]
    expected = [np.sqrt(29.0) / 2, 1.0, 2.5, 1.0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values(grads, 2.0)), expected, rtol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values(grads)), [np.sqrt(29.0), 2.0, 5.0, 1.0])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values([None, None, None])), [0, 0, 0, 1])


@pytest.mark.parametrize("host", [False, True], ids=["tensor", "host"])
def test_metric_mean_counts_weighted_steps_and_keeps_the_last_counted_step(host):
    metric = GradientNormMetric(["grad_norm", "grad_norm/a"])
    assert np.isnan([float(v) for v in metric.result().values()]).all()  # nothing applied yet: NaN, not 0
    for _ in range(2):  # two epochs: reset_state starts the host sums again
        for step in ([3.0, 1.0, 1.0], [5.0, 3.0, 1.0], [0.0, 0.0, 0.0]):  # the last step does not count
            metric.update_state(step if host else keras.ops.convert_to_tensor(step))
        result = metric.result()
        assert {k: float(v) for k, v in result.items()} == {"grad_norm": 4.0, "grad_norm/a": 2.0}
        assert all(isinstance(v, float) for v in result.values()) == host  # host values stay Python floats
        metric.reset_state()
        # No counted step since the reset: the last counted step's values, never 0.
        assert {k: float(v) for k, v in metric.result().items()} == {"grad_norm": 5.0, "grad_norm/a": 3.0}


def test_logged_value_is_a_python_float_only_on_the_host_path(norm_path):
    model = track_gradient_norm(mlp())
    logs = model.train_on_batch(X, Y, return_dict=True)  # Keras converts the logs to Python floats
    assert logs["grad_norm"] == pytest.approx(gradkit.gradient_norm(mlp(), X, Y), rel=1e-5)
    metric_value = model._gradkit_grad_norm.result()["grad_norm"]
    assert isinstance(metric_value, float) == (norm_path == "host")


def test_gradient_accumulation_logs_the_applied_update(norm_path):
    model = mlp(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2))
    replica = mlp()  # plain SGD(0.1): one step on the first 8 rows is the first accumulated update
    x, y = np.concatenate([X, X[::-1]]), np.concatenate([Y, Y[::-1]])
    first = gradkit.gradient_norm(replica, x[:8], y[:8])
    fit(replica, x[:8], y[:8])
    second = gradkit.gradient_norm(replica, x[8:], y[8:])
    callback = GradientNormCallback()
    history = fit(model, x, y, callback, batch_size=4)
    np.testing.assert_allclose(callback.steps["grad_norm"], [[first, second]], rtol=1e-5)
    assert history["grad_norm"][0] == pytest.approx((first + second) / 2, rel=1e-5)
    fit(replica, x[8:], y[8:])
    np.testing.assert_allclose(model.get_weights()[0], replica.get_weights()[0], rtol=1e-5, atol=1e-6)


def test_logs_history_csv_and_no_validation_entry(tmp_path):
    model = mlp()
    path = tmp_path / "log.csv"
    callbacks = [GradientNormCallback(), keras.callbacks.CSVLogger(str(path))]
    history = model.fit(X, Y, epochs=2, verbose=0, validation_data=(X, Y), callbacks=callbacks).history
    assert "grad_norm" in history and "val_grad_norm" not in history and "val_loss" in history
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert "grad_norm" in rows[0] and "val_grad_norm" not in rows[0]
    np.testing.assert_allclose([float(r["grad_norm"]) for r in rows], history["grad_norm"], rtol=1e-6)


def test_train_on_batch_and_recompile_and_untrack():
    model = mlp()
    assert track_gradient_norm(model) is model
    metric = model._gradkit_grad_norm
    track_gradient_norm(model)  # idempotent
    assert model._gradkit_grad_norm is metric
    for _ in range(2):  # metrics are reset by train_on_batch: each value is that batch's norm
        expected = gradkit.gradient_norm(model, X[:4], Y[:4])
        logs = model.train_on_batch(X[:4], Y[:4], return_dict=True)
        assert logs["grad_norm"] == pytest.approx(expected, rel=1e-5)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=LOSS)
    assert metric in model.metrics
    expected = gradkit.gradient_norm(model, X, Y)
    assert fit(model, X, Y)["grad_norm"][0] == pytest.approx(expected, rel=1e-5)
    untrack_gradient_norm(model)
    assert metric not in model.metrics and "grad_norm" not in fit(model, X, Y)


def test_tensorboard_scalars_equal_the_history(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    callbacks = [GradientNormCallback(per_layer=True), keras.callbacks.TensorBoard(str(tmp_path))]
    history = mlp().fit(X, Y, batch_size=4, epochs=2, verbose=0, callbacks=callbacks).history
    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0})
    events.Reload()
    for key in ("grad_norm", "grad_norm/hidden", "grad_norm/logits"):
        logged = [float(make_ndarray(event.tensor_proto)) for event in events.Tensors(f"epoch_{key}")]
        np.testing.assert_allclose(logged, history[key], rtol=1e-6)


def test_a_tracked_model_saves_and_loads_without_the_tracking(tmp_path):
    model = mlp()
    fit(model, X, Y, GradientNormCallback(per_layer=True))
    path = str(tmp_path / "tracked.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(X, verbose=0), model.predict(X, verbose=0), rtol=1e-6)
    assert not any(key.startswith("grad_norm") for key in fit(loaded, X, Y))
    track_gradient_norm(model)  # a model saved while tracked trains on, tracked
    model.save(path)
    expected = gradkit.gradient_norm(model, X, Y)
    assert fit(model, X, Y)["grad_norm"][0] == pytest.approx(expected, rel=1e-5)
    assert not any(key.startswith("grad_norm") for key in fit(keras.models.load_model(path), X, Y))


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5, activation="tanh")
        self.out = keras.layers.Dense(3)

    def call(self, x):
        return self.out(self.hidden(x))


@pytest.mark.slow
def test_built_subclassed_model_and_embedding_with_repeated_ids():
    model = Subclassed()
    model(X)
    set_weights_from(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")  # mse: engine can't size its classes
    onehot = np.eye(3, dtype=np.float32)[Y]
    expected = gradkit.gradient_norm(model, X, onehot, per_layer=True)
    history = fit(model, X, onehot, GradientNormCallback(per_layer=True))
    assert {k: v[0] for k, v in history.items() if k != "loss"} == pytest.approx(expected, rel=1e-5)
    ids = np.array([[1, 1, 3], [3, 1, 1]], np.int32)  # repeated rows: TF's sparse gradient must be summed
    embed = keras.Sequential(
        [
            keras.Input((3,), dtype="int32"),
            keras.layers.Embedding(10, 4),
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    set_weights_from(embed)
    embed.compile(optimizer=keras.optimizers.SGD(0.1), loss=LOSS)
    expected = gradkit.gradient_norm(embed, ids, np.array([0, 1]))
    assert fit(embed, ids, np.array([0, 1]), GradientNormCallback())["grad_norm"][0] == pytest.approx(
        expected, rel=1e-5
    )


def test_bad_arguments_are_rejected():
    with pytest.raises(TypeError, match="`per_layer` must be True or False"):
        GradientNormCallback(per_layer="yes")
    with pytest.raises(TypeError, match="`model` must be a keras.Model"):
        track_gradient_norm(object())
    with pytest.raises(ValueError, match="built model"):
        track_gradient_norm(keras.Sequential([keras.layers.Dense(2)]), per_layer=True)
