"""The training diagnostics of `include=` (clipped norms, parameter and update norms, health counters) and
`every_n_steps`: each key against a hand computation from the weights before and after one step."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.monitor import GradientNormCallback, track_gradient_norm, untrack_gradient_norm
from helpers.training import LOSS, X, Y, fit, mlp

X0 = X.copy()
X0[:, 0] = 0.0  # a dead input: the hidden kernel's first row gets exact-zero gradients
LAYERS = {"hidden": [0, 1], "logits": [2, 3]}  # indices in model.trainable_variables


def squares(arrays, indices=None):
    indices = range(len(arrays)) if indices is None else indices
    return sum(float(np.sum(np.square(arrays[i], dtype=np.float64))) for i in indices)


def by_hand(w0, w1, grads):
    """Every key (global and per layer) of include="all" without clipping, in numpy."""
    out = {}
    for suffix, idx in [("", None), *((f"/{k}", v) for k, v in LAYERS.items())]:
        idx = range(len(grads)) if idx is None else idx
        flat = np.concatenate([grads[i].ravel() for i in idx])
        update = [w1[i] - w0[i] for i in range(len(w0))]
        out["grad_norm" + suffix] = np.sqrt(squares(grads, idx))
        out["grad_norm_clipped" + suffix] = out["grad_norm" + suffix]
        out["clip_fraction" + suffix] = 0.0
        out["param_norm" + suffix] = np.sqrt(squares(w0, idx))
        out["update_norm" + suffix] = np.sqrt(squares(update, idx))
        out["update_ratio" + suffix] = out["update_norm" + suffix] / out["param_norm" + suffix]
        out["grad_max" + suffix] = float(np.max(np.abs(flat)))
        out["grad_nonfinite" + suffix] = 0.0
        out["grad_zero_fraction" + suffix] = float(np.mean(flat == 0.0))
    return out


def test_every_key_equals_a_hand_computation_from_one_train_on_batch(norm_path):
    model = mlp(keras.optimizers.Adam(0.01))  # an update that is not a multiple of the gradient
    track_gradient_norm(model, per_layer=True, include="all")
    w0 = [np.array(v) for v in model.get_weights()]
    grads = gradkit.weight_gradients(model, X0, Y)
    logs = model.train_on_batch(X0, Y, return_dict=True)
    expected = by_hand(w0, model.get_weights(), grads)
    assert expected["grad_zero_fraction/hidden"] == pytest.approx(6 / 30)  # the dead input's row
    noise = ["noise_scale", "noise_scale/hidden", "noise_scale/logits"]  # "all" has it: test_noise_scale.py
    assert sorted(k for k in logs if k not in ["loss", *noise]) == sorted(expected)
    assert all(np.isfinite(logs[k]) for k in noise)
    for key, value in expected.items():
        assert logs[key] == pytest.approx(value, rel=2e-5, abs=1e-12), key


def test_global_values_are_roots_of_sums_of_squares_never_sums_of_layer_norms():
    model = track_gradient_norm(mlp(keras.optimizers.SGD(0.5)), per_layer=True, include="all")
    logs = model.train_on_batch(X, Y, return_dict=True)
    for key in ("grad_norm", "grad_norm_clipped", "param_norm", "update_norm"):
        layers = [logs[f"{key}/{name}"] for name in LAYERS]
        assert logs[key] == pytest.approx(np.sqrt(np.sum(np.square(layers))), rel=1e-6)
        assert logs[key] < 0.99 * sum(layers)
    assert logs["grad_max"] == pytest.approx(max(logs[f"grad_max/{name}"] for name in LAYERS))


@pytest.mark.parametrize("clip", ["clipnorm", "global_clipnorm", "clipvalue"])
def test_clipped_norm_and_fraction_are_the_optimizers_own_clipping(clip, norm_path):
    # SGD(1.0): the weight change is minus the clipped gradient, so its norm is the clipped norm.
    for threshold, fired in ((0.05, 1.0), (1e3, 0.0)):
        model = mlp(keras.optimizers.SGD(1.0, **{clip: threshold}))
        track_gradient_norm(model, per_layer=True, include=("norm", "clipped"))
        w0 = [np.array(v) for v in model.get_weights()]
        logs = model.train_on_batch(X, Y, return_dict=True)
        change = [b - a for a, b in zip(w0, model.get_weights())]
        for suffix, idx in [("", None), *((f"/{k}", v) for k, v in LAYERS.items())]:
            clipped = np.sqrt(squares(change, idx))
            assert logs["grad_norm_clipped" + suffix] == pytest.approx(clipped, rel=1e-4), suffix
            assert logs["clip_fraction" + suffix] == fired
        assert (logs["grad_norm_clipped"] < logs["grad_norm"]) == bool(fired)


def test_clip_fraction_is_the_share_of_clipped_steps():
    model = mlp(keras.optimizers.SGD(0.0, global_clipnorm=1.0))  # weights fixed: each batch's own norm
    norms = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    history = fit(model, X, Y, GradientNormCallback(include="clipped"), batch_size=2)
    assert 0 < sum(n > 1.0 for n in norms) < 4
    assert history["clip_fraction"][0] == pytest.approx(np.mean([n > 1.0 for n in norms]))
    assert history["grad_norm_clipped"][0] == pytest.approx(np.mean(np.minimum(norms, 1.0)), rel=1e-5)


def test_every_n_steps_records_every_nth_update_across_epochs_and_fits(norm_path):
    model = mlp(keras.optimizers.SGD(0.0))  # weights fixed: step i's norm is its batch's
    batches = [gradkit.gradient_norm(model, X[i : i + 2], Y[i : i + 2]) for i in range(0, 8, 2)]
    callback = GradientNormCallback(include=("norm", "health"), every_n_steps=3)
    history = fit(model, X, Y, callback, batch_size=2, epochs=2)  # optimizer steps 0-7: 0, 3, 6 recorded
    np.testing.assert_allclose(callback.steps["grad_norm"][0], [batches[0], batches[3]], rtol=1e-5)
    np.testing.assert_allclose(callback.steps["grad_norm"][1], [batches[2]], rtol=1e-5)
    np.testing.assert_allclose(history["grad_norm"], [np.mean(batches[::3]), batches[2]], rtol=1e-5)
    history = fit(model, X, Y, callback, batch_size=2)  # steps 8-11: 9 recorded (batch 1)
    np.testing.assert_allclose(callback.steps["grad_norm"][2], [batches[1]], rtol=1e-5)
    assert history["grad_norm"][0] == pytest.approx(batches[1], rel=1e-5)


@pytest.mark.parametrize("include", [("norm",), "all"])
def test_gradient_accumulation_values_are_the_applied_updates_never_zero(include, norm_path):
    model = mlp(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2))
    track_gradient_norm(model, include=include)
    w0 = [np.array(v) for v in model.get_weights()]
    g = [gradkit.weight_gradients(model, X[i : i + 4], Y[i : i + 4]) for i in (0, 4)]
    applied = [(a + b) / 2 for a, b in zip(*g)]  # the update's gradient: the mean of the two
    first = model.train_on_batch(X[:4], Y[:4], return_dict=True)  # accumulates only: nothing applied yet
    assert np.isnan(first["grad_norm"])
    second = model.train_on_batch(X[4:], Y[4:], return_dict=True)  # applies the update
    assert second["grad_norm"] == pytest.approx(np.sqrt(squares(applied)), rel=1e-5)
    third = model.train_on_batch(X[:4], Y[:4], return_dict=True)  # accumulates: the last update's values
    assert third == pytest.approx({**second, "loss": third["loss"]}, rel=1e-6)
    if include == "all":
        w1 = model.get_weights()
        assert second["update_norm"] == pytest.approx(np.sqrt(squares([b - a for a, b in zip(w0, w1)])))
        assert second["param_norm"] == pytest.approx(np.sqrt(squares(w0)), rel=1e-6)
        assert second["grad_max"] == pytest.approx(max(np.abs(a).max() for a in applied), rel=1e-5)


def test_mixed_float16_values_are_unscaled():
    reference = mlp()
    grads = gradkit.weight_gradients(reference, X, Y)
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = mlp()
    finally:
        keras.config.set_dtype_policy("float32")
    track_gradient_norm(model, include=("norm", "clipped", "health"))
    logs = model.train_on_batch(X, Y, return_dict=True)
    assert float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale.value)) > 1000.0
    assert logs["grad_norm"] == pytest.approx(np.sqrt(squares(grads)), rel=1e-3)
    assert logs["grad_norm_clipped"] == logs["grad_norm"]
    assert logs["grad_max"] == pytest.approx(max(np.abs(g).max() for g in grads), rel=1e-3)


def test_a_nonfinite_gradient_is_counted():
    model = track_gradient_norm(mlp(), per_layer=True, include="health")
    x = X.copy()
    # inf in one input: tanh saturates (the forward pass stays finite), and the hidden kernel's row 1,
    # sum_n x[n, 1] * delta[n], is inf * delta[0]: NaN or inf, its 6 entries; nothing else.
    x[0, 1] = np.inf
    logs = model.train_on_batch(x, Y, return_dict=True)
    assert (logs["grad_nonfinite"], logs["grad_nonfinite/hidden"], logs["grad_nonfinite/logits"]) == (6, 6, 0)


def test_the_callback_restores_the_tracking_it_found():
    model = track_gradient_norm(mlp(), include="health")
    history = fit(model, X, Y, GradientNormCallback(include=("norm", "params")))
    assert "param_norm" in history and "grad_max" not in history
    assert model._gradkit_grad_norm.config["include"] == ("health",)
    assert "grad_max" in fit(model, X, Y) and "param_norm" not in fit(model, X, Y)
    untrack_gradient_norm(model)


def test_bad_arguments_are_rejected_before_fit():
    with pytest.raises(ValueError, match="`include` must be a group name"):
        GradientNormCallback(include=("norm", "weights"))
    with pytest.raises(ValueError, match="`include` must be"):
        track_gradient_norm(mlp(), include=[])
    with pytest.raises(TypeError, match="`include` must be"):
        GradientNormCallback(include=3)
    with pytest.raises(ValueError, match="`every_n_steps` must be an integer >= 1"):
        GradientNormCallback(every_n_steps=0)
    with pytest.raises(TypeError, match="`every_n_steps` must be an integer"):
        track_gradient_norm(mlp(), every_n_steps=2.0)
    frozen = mlp()
    frozen.trainable = False
    frozen.compile(optimizer="sgd", loss=LOSS)
    with pytest.raises(ValueError, match="`per_layer` must be False for a model without a trainable"):
        frozen.fit(X, Y, verbose=0, callbacks=[GradientNormCallback(per_layer=True)])
