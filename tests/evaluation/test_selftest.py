"""`gradkit.selftest`, the binarization test (Zimmermann et al. 2022): its sampled points lie where the
paper puts them, the readout separates them, the standard attack passes on a linear model and on the digits
CNN, and a gradient attack fails on a model behind an input-rounding layer unless BPDA's identity
surrogate is given."""

import json

import keras
import numpy as np
import pytest

import gradkit
from gradkit import _keras_internals
from gradkit.evaluation import _selftest_readout as readout
from helpers import models

FAST = dict(clip_values=(0.0, 1.0), n_inner=49, steps=10, n_queries=100, verbose=0)


@pytest.fixture(scope="module")
def linear():
    """The least-squares digits classifier, its copy behind an 8-bit rounding layer, and 100 digits."""
    return models.digits_linear()


def test_inner_points_fill_eta_eps_and_boundary_points_lie_at_eps_inside_the_box():
    rng = np.random.default_rng(0)
    x0 = np.array([0.0, 0.02, 0.5, 1.0, 0.97, 0.3], np.float32)  # on and near both edges of [0, 1]
    for norm, size in ((np.inf, lambda d: np.abs(d).max(1)), (2.0, lambda d: np.linalg.norm(d, axis=1))):
        inner = readout.sample_inner(x0, 200, 0.95 * 0.1, norm, (0.0, 1.0), rng)
        boundary = readout.sample_boundary(x0, 50, 0.1, norm, (0.0, 1.0), rng)
        assert inner.dtype == boundary.dtype == np.float32 and inner.shape == (200, 6)
        assert size(inner.astype(np.float64) - x0).max() <= 0.095 + 1e-7
        np.testing.assert_allclose(size(boundary.astype(np.float64) - x0), 0.1, atol=1e-6)  # clipped too
        assert inner.min() >= 0 and boundary.min() >= 0 and inner.max() <= 1 and boundary.max() <= 1
    # Linf inner points are uniform in the box: a quarter of each coordinate's mass in its outer halves
    spread = np.abs(readout.sample_inner(np.full(4, 0.5), 4000, 0.2, np.inf, None, rng) - 0.5)
    assert 0.45 < np.mean(spread > 0.1) < 0.55


def test_the_readout_separates_a_point_from_a_cloud_and_spans_minus_one_to_one():
    rng = np.random.default_rng(1)
    features = np.vstack([np.zeros((1, 3)), rng.uniform(-1, 1, (40, 3)), [[3.0, 0.0, 0.0]]])
    is_boundary = np.arange(42) == 41
    kernel, bias = readout.fit_readout(features, is_boundary)
    z = features @ kernel.astype(np.float64) + bias
    d = z[:, 1] - z[:, 0]
    assert np.all(d[is_boundary] > 0) and np.all(d[~is_boundary] < 0)
    assert np.abs(d).max() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(z[:, 0], -z[:, 1], atol=1e-6)  # logits (-d/2, d/2)
    wide = np.hstack([features, rng.normal(size=(42, 100))])  # more features than points: the row span
    kernel, bias = readout.fit_readout(wide, is_boundary)
    d = (wide @ kernel.astype(np.float64) + bias) @ [-1.0, 1.0]
    assert np.all(d[is_boundary] > 0) and np.all(d[~is_boundary] < 0)
    assert readout.fit_readout(np.ones((5, 3)), np.arange(5) == 4) is None  # nothing to separate


def test_standard_passes_on_a_linear_model(linear):
    model, _, x, y = linear
    result = gradkit.selftest(model, x[:3], y[:3], eps=0.1, **FAST)
    assert result.passed and result.success_rate == 1.0 and result.failed_setups == []
    assert [p["index"] for p in result.points] == [0, 1, 2]
    for p in result.points:
        assert p["separated"] and p["success"] and p["logit_difference"] > 0
        assert 0 < p["boundary_logit_difference"] <= 1
        b = p["boundary_logit_difference"]
        assert p["improvement"] == pytest.approx((p["logit_difference"] - b) / b)
    assert result.improvement == pytest.approx(np.mean([p["improvement"] for p in result.points]))
    assert result.points[0]["correct"] == bool(model.predict(x[:1], verbose=0).argmax() == y[0])
    text = str(result)
    assert text.splitlines()[-1].startswith("PASS: ") and "success rate 1.0000 (3 of 3" in text
    saved = json.loads(json.dumps(result.to_dict()))
    assert saved["verdict"] == "PASS" and saved["norm"] == "linf" and saved["attack"] == "standard"


def test_standard_passes_on_a_linear_model_in_l2(linear):
    model, _, x, y = linear
    result = gradkit.selftest(model, x[3:4], y[3:4], eps=0.5, norm=2, **FAST)
    assert result.passed and result.points[0]["success"] and result.points[0]["broken_by"] == "apgd-ce"


def test_standard_passes_on_the_digits_cnn():
    model, x, y = models.digits_cnn(filters=8, n_train=600, epochs=4, n_test=2)
    assert models.accuracy(model, x, y) == 1.0  # trained: both digits right
    result = gradkit.selftest(model, x[:2], y[:2], eps=0.1, **FAST)
    assert result.passed and result.success_rate == 1.0 and not result.failed_setups


def test_a_rounding_layer_fails_the_gradient_attack_unless_the_identity_is_its_surrogate(linear):
    model, rounded, x, y = linear
    plain = gradkit.selftest(rounded, x[:2], y[:2], eps=0.1, attack="apgd-ce", **FAST)
    assert not plain.passed and plain.success_rate == 0.0 and not plain.failed_setups
    assert all(p["logit_difference"] < 0 and p["improvement"] < -1 for p in plain.points)
    assert str(plain).splitlines()[-1].startswith("FAIL: the attack missed") and "surrogate=" in str(plain)
    bpda = gradkit.selftest(rounded, x[:1], y[:1], eps=0.1, attack="apgd-ce", surrogate=model, **FAST)
    assert bpda.passed and bpda.success_rate == 1.0
    # the standard version passes without BPDA: Square needs no gradient (and finds a weaker example)
    standard = gradkit.selftest(rounded, x[:1], y[:1], eps=0.1, **FAST)
    assert standard.passed and standard.points[0]["broken_by"] == "square"


def test_a_readout_that_cannot_separate_is_a_failed_setup_and_no_pass():
    inputs = keras.Input((4,))
    constant = keras.layers.Dense(3, kernel_initializer="zeros", bias_initializer="ones")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(constant))  # its features ignore the input
    x = np.random.default_rng(0).uniform(0.2, 0.8, (2, 4)).astype("float32")
    result = gradkit.selftest(model, x, [0, 1], eps=0.1, **FAST)
    assert not result.passed and result.success_rate is None and result.failed_setups == [0, 1]
    assert "no readout separated" in str(result) and str(result).count("fails") == 2


def test_the_features_are_read_before_a_softmax_and_per_graph_of_a_shared_dense_layer(linear):
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(7, activation="relu")(inputs)
    out = keras.layers.Activation("softmax")(keras.layers.Dense(3)(hidden))
    _, features = readout.penultimate(keras.Model(inputs, out))
    assert tuple(features.shape) == (None, 7)
    dense = keras.layers.Dense(3, activation="softmax")  # replaced whole, its softmax with it
    sequential = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), dense])
    assert tuple(readout.penultimate(sequential)[1].shape) == (None, 4)
    model, rounded, _, _ = linear  # one Dense layer called in two graphs: each graph's own input to it
    assert readout.penultimate(model)[1] is model.inputs[0]
    rounding = readout.penultimate(rounded)[1]
    assert isinstance(_keras_internals.producing_layer(rounding), models.Round255)


def _bad_models():
    inputs = keras.Input((4,))
    lambda_out = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 2.0)(keras.layers.Dense(3)(inputs)))
    return {"lambda": lambda_out, "ensemble": gradkit.WeightedEnsemble([lambda_out, lambda_out], [1, 1])}


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"eps": 0.0}, ValueError, r"`eps` must be > 0. Received: eps=0.0"),
        ({"norm": 1}, ValueError, r"`norm` must be np.inf .* or 2 .*Received: norm=1"),
        ({"n_inner": 0}, ValueError, r"`n_inner` must be an integer >= 1. Received: n_inner=0"),
        ({"n_boundary": 1.5}, TypeError, r"`n_boundary` must be an integer >= 1"),
        ({"eta": 1.5}, ValueError, r"`eta` must be > 0 and <= 1. Received: eta=1.5"),
        ({"attack": "nope"}, ValueError, r"`attack` must be \"standard\", an attack name"),
        ({"attack": "apgd-t"}, ValueError, r"`attack` must be free of 'apgd-t' .*two classes\)$"),
        ({"surrogate": lambda t: t}, TypeError, r"`surrogate` must be None or a Keras model"),
        ({"clip_values": (0.3, 1.0)}, ValueError, r"`x` must be inside clip_values"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(linear, change, error, match):
    model, _, x, y = linear
    with pytest.raises(error, match=match):
        gradkit.selftest(model, x[:2], y[:2], **{**FAST, "eps": 0.1, **change})


def test_models_without_a_last_dense_layer_are_refused(linear):
    model, _, x, y = linear
    bad = _bad_models()
    with pytest.raises(ValueError, match=r"output comes from '.*' \(Lambda\)"):
        gradkit.selftest(bad["lambda"], x[:1, :4], y[:1], eps=0.1, **FAST)
    with pytest.raises(ValueError, match=r"`model` must be a Sequential or Functional Keras model"):
        gradkit.selftest(bad["ensemble"], x[:1, :4], y[:1], eps=0.1, **FAST)
    inputs = keras.Input((64,))
    narrow = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Dense(5)(inputs)))
    with pytest.raises(ValueError, match=r"reads 64 features, as the model's does"):
        gradkit.selftest(model, x[:1], y[:1], eps=0.1, surrogate=narrow, **FAST)
