"""Adversarial training inside `fit` (`adversarial_training`, `untrack_adversarial_training`:
`gradkit.training._install`): PGD, TRADES and fast FGSM, the inner examples, the loss trained on, bad
input refused before any change, and the model left as it was."""

import zipfile

import h5py
import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.attacks import fgsm, pgd
from gradkit.monitor import gradient_norm, track_gradient_norm, untrack_gradient_norm
from gradkit.training import adversarial_training, untrack_adversarial_training
from gradkit.training._geometry import replaced_rows
from gradkit.training._objective import adversarial_examples, kl_per_sample
from gradkit.training._settings import make_settings

from conftest import tsipras

X, Y = tsipras(512, 0)
XT, YT = tsipras(256, 1)
CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mlp(hidden=16, features=31, optimizer=None):
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(hidden, activation="relu")] if hidden else []
    model = keras.Sequential([keras.Input((features,)), *layers, keras.layers.Dense(2)])
    model.compile(optimizer or keras.optimizers.Adam(1e-2), CE)
    return model


def accuracy(model, x, y):
    return float(np.mean(np.argmax(model.predict(x, verbose=0), axis=-1) == y))


@pytest.fixture
def captured(monkeypatch):
    """The inner attack's examples of the last call, recorded around `backend.input_ascent`."""
    seen, original = {}, backend.input_ascent

    def spy(*args):
        seen["x_adv"] = original(*args)  # a tracer inside a traced step: read only after eager calls
        return seen["x_adv"]

    monkeypatch.setattr(backend, "input_ascent", spy)
    return seen


def logits(model, x):
    x = keras.ops.convert_to_numpy(x)
    return keras.ops.convert_to_numpy(model(x, training=False)).astype(np.float64)


def np_ce(z, y):
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -log_p[np.arange(len(y)), y]


def np_kl(z_clean, z_adv):
    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(z_clean), log_softmax(z_adv)
    return np.sum(np.exp(lp) * (lp - lq), axis=1)


def train_loss(model, x, y, sample_weight=None):
    y_pred = model(x, training=True)
    loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    return float(keras.ops.convert_to_numpy(loss))


def test_pgd_training_is_more_robust_than_standard_training():
    eps = 0.6
    standard, robust = mlp(), mlp()
    adversarial_training(robust, eps=eps, steps=2, seed=0)
    for model in (standard, robust):
        model.fit(X, Y, batch_size=64, epochs=12, verbose=0)
    x_std = pgd(standard, XT, YT, eps=eps, eps_step=eps / 4, steps=10, seed=0)
    x_rob = pgd(robust, XT, YT, eps=eps, eps_step=eps / 4, steps=10, seed=0)
    assert accuracy(robust, x_rob, YT) > accuracy(standard, x_std, YT) + 0.25
    assert accuracy(robust, XT, YT) > 0.85


@pytest.mark.parametrize("norm", [np.inf, 2])
@pytest.mark.parametrize("attack", ["pgd", "fgsm"])
def test_inner_examples_stay_in_the_ball_and_the_clip_range(norm, attack):
    model = mlp(features=6)
    x = np.random.default_rng(0).uniform(0, 1, (16, 6)).astype("float32")
    y = np.arange(16) % 2
    settings = make_settings(attack, 0.3, None, 5, norm, (0.0, 1.0), True, "ce", 6.0, 1.0)
    spec_loss = lambda out: keras.ops.sum(CE(y, out)) * 16.0  # noqa: E731
    x_adv = keras.ops.convert_to_numpy(
        adversarial_examples(
            lambda z: model(z, training=False), settings, x, spec_loss, keras.random.SeedGenerator(0)
        )
    )
    delta = (x_adv - x).reshape(16, -1)
    size = np.abs(delta).max(axis=1) if norm == np.inf else np.linalg.norm(delta, axis=1)
    assert np.all(size <= 0.3 + 1e-5) and np.all(size > 0)
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


def test_trades_loss_is_the_clean_loss_plus_beta_times_the_kl(captured):
    model = mlp(hidden=0)
    x, y = X[:32], Y[:32]
    adversarial_training(model, loss="trades", eps=0.5, steps=2, beta=3.0, seed=0)
    value = train_loss(model, x, y)
    z_clean, z_adv = logits(model, x), logits(model, captured["x_adv"])
    kl = np_kl(z_clean, z_adv)
    assert kl.mean() > 1e-3  # the attack moved the prediction: the term matters
    assert value == pytest.approx(np_ce(z_clean, y).mean() + 3.0 * kl.mean(), rel=1e-4)
    ours = keras.ops.convert_to_numpy(kl_per_sample(z_clean.astype("float32"), z_adv.astype("float32"), True))
    np.testing.assert_allclose(ours, kl, rtol=1e-4, atol=1e-6)


def test_ratio_half_replaces_half_the_batch_and_sample_weights_count(captured):
    assert [
        int(np.sum(keras.ops.convert_to_numpy(replaced_rows(np.zeros((n, 2)), 0.5)))) for n in (8, 7)
    ] == [
        4,
        4,
    ]
    model = mlp(hidden=0)
    x, y = X[:8], Y[:8]
    weights = np.linspace(0.5, 2.0, 8).astype("float32")
    adversarial_training(model, eps=0.5, steps=2, ratio=0.5, seed=0)
    value = train_loss(model, x, y, weights)
    z = logits(model, x)
    z[:4] = logits(model, captured["x_adv"])[:4]
    assert value == pytest.approx(np.sum(np_ce(z, y) * weights) / 8, rel=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"eps": -0.1}, ValueError),
        ({"eps": 0.1, "attack": "cw"}, ValueError),
        ({"eps": 0.1, "loss": "hinge"}, ValueError),
        ({"eps": 0.1, "ratio": 0.0}, ValueError),
        ({"eps": 0.1, "ratio": 1.5}, ValueError),
        ({"eps": 0.1, "steps": 0}, ValueError),
        ({"eps": 0.1, "steps": 2.5}, TypeError),
        ({"eps": 0.1, "eps_step": 0.0}, ValueError),
        ({"eps": 0.1, "norm": 1}, ValueError),
        ({"eps": 0.1, "clip_values": (1, 0)}, ValueError),
        ({"eps": 0.1, "random_start": 1}, TypeError),
        ({"eps": 0.1, "beta": -1.0}, ValueError),
        ({"eps": 0.1, "seed": -1}, ValueError),
        ({"eps": "0.1"}, TypeError),
    ],
)
def test_bad_input_raises_before_any_change(kwargs, error):
    model = mlp(hidden=0)
    with pytest.raises(error, match="must be"):
        adversarial_training(model, **kwargs)
    assert "compute_loss" not in vars(model) and "_gradkit_adversarial" not in vars(model)


def test_bad_model_and_trades_on_a_regression_loss_raise():
    with pytest.raises(TypeError, match="`model` must be"):
        adversarial_training("model", eps=0.1)
    model = mlp(hidden=0)
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match="categorical cross-entropy"):
        adversarial_training(model, eps=0.1, loss="trades")
    assert "compute_loss" not in vars(model)


def test_untrack_restores_the_model_exactly():
    plain, undone = mlp(optimizer="sgd"), mlp(optimizer="sgd")  # no optimizer state to differ
    names = [m.name for m in undone.metrics]
    adversarial_training(undone, eps=0.5, seed=0)
    adversarial_training(undone, eps=0.5, loss="trades", seed=0)  # replaces the first
    assert len(undone.metrics) == len(names) + 1
    assert np.isfinite(undone.train_on_batch(X[:64], Y[:64]))  # TRADES in the compiled step
    untrack_adversarial_training(undone)
    assert "compute_loss" not in vars(undone) and [m.name for m in undone.metrics] == names
    undone.set_weights(plain.get_weights())
    plain.train_on_batch(X[64:128], Y[64:128])
    undone.train_on_batch(X[64:128], Y[64:128])
    for a, b in zip(plain.get_weights(), undone.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert untrack_adversarial_training(undone) is undone  # a no-op the second time


@pytest.mark.parametrize("adversarial_first", [True, False])
def test_the_logged_grad_norm_is_that_of_the_adversarial_objective(adversarial_first):
    model, eps = mlp(), 0.3
    x, y = X[:32], Y[:32]
    install = [
        lambda: adversarial_training(model, "fgsm", eps=eps, random_start=False),
        lambda: track_gradient_norm(model),
    ]
    for step in install if adversarial_first else install[::-1]:
        step()
    expected = gradient_norm(model, fgsm(model, x, y, eps=eps), y)
    assert expected != pytest.approx(gradient_norm(model, x, y), rel=1e-2)
    logged = model.train_on_batch(x, y, return_dict=True)["grad_norm"]
    assert float(logged) == pytest.approx(expected, rel=1e-4)
    untrack_gradient_norm(model)
    assert "compute_loss" in vars(model)  # each undo removes its own part only


def h5_paths(path):
    with h5py.File(path, "r") as f:
        names = []
        f.visit(names.append)
    return names


def test_a_saved_model_carries_no_trace(tmp_path):
    plain, model = mlp(), mlp()
    adversarial_training(model, eps=0.5, seed=0)
    for m in (plain, model):  # with sample weights through fit
        m.fit(X, Y, sample_weight=np.linspace(0.5, 2.0, len(X)), batch_size=64, epochs=1, verbose=0)
    model.save(tmp_path / "adv.keras")
    plain.save(tmp_path / "plain.keras")
    loaded = keras.models.load_model(tmp_path / "adv.keras")
    assert "compute_loss" not in vars(loaded) and "_gradkit_adversarial" not in vars(loaded)
    np.testing.assert_allclose(loaded.predict(XT, verbose=0), model.predict(XT, verbose=0), rtol=1e-5)
    with zipfile.ZipFile(tmp_path / "adv.keras") as a, zipfile.ZipFile(tmp_path / "plain.keras") as b:
        assert a.namelist() == b.namelist()
        a.extract("model.weights.h5", tmp_path / "a")
        b.extract("model.weights.h5", tmp_path / "b")
    assert h5_paths(tmp_path / "a" / "model.weights.h5") == h5_paths(tmp_path / "b" / "model.weights.h5")


def _confident_softmax():
    rng = np.random.RandomState(0)
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(16, activation="tanh")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(hidden))
    for w in model.weights:
        w.assign((rng.randn(*w.shape) * 8).astype("float32"))
    x = rng.uniform(0, 1, (32, 6)).astype("float32")
    return model, x, np.asarray(model.predict(x, verbose=0)).argmax(1)


def test_adversarial_training_on_a_saturated_softmax_trains_on_the_examples_loss():
    """The inner attack goes through the logits: the loss `fit` trains on is the loss at the examples
    gradkit's PGD (same steps, no random start, last iterate) finds, not the clean loss."""
    model, x, y = _confident_softmax()
    model.compile(keras.optimizers.SGD(learning_rate=0.0), "sparse_categorical_crossentropy")
    clean = model.evaluate(x, y, verbose=0)
    gradkit.adversarial_training(model, eps=0.3, steps=10, random_start=False, clip_values=(0, 1))
    trained = model.train_on_batch(x, y)
    gradkit.untrack_adversarial_training(model)
    x_adv = gradkit.pgd(
        model, x, y, eps=0.3, eps_step=0.075, steps=10, random_start=False, keep="last", clip_values=(0, 1)
    )
    at_examples = model.evaluate(x_adv, y, verbose=0)
    assert clean < 0.05 and at_examples > 3.0
    np.testing.assert_allclose(trained, at_examples, rtol=1e-4)


def test_adversarial_training_refuses_several_inputs_or_outputs():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(4)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], [keras.layers.Dense(3, name="cls")(hidden), keras.layers.Dense(1)(hidden)])
    with pytest.raises(ValueError, match=r"one input and one output.*2 inputs \['a', 'b'\]"):
        gradkit.adversarial_training(model, eps=0.1)
    single = keras.Model(a, [keras.layers.Dense(3, name="c1")(a), keras.layers.Dense(2, name="c2")(a)])
    with pytest.raises(ValueError, match=r"2 outputs"):
        gradkit.adversarial_training(single, eps=0.1)
