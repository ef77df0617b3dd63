"""The certified side of `gradkit.evaluate` (`evaluation._certified`): closed forms on linear models, the
weighted vote from member certificates, the contradiction flag."""

import keras
import numpy as np
import pytest
from keras import layers

from gradkit import WeightedEnsemble
from gradkit.evaluation import _certified


def _linear(kernel, bias):
    model = keras.Sequential([keras.Input((2,)), layers.Dense(2)])
    model.layers[0].set_weights([np.asarray(kernel, np.float32), np.asarray(bias, np.float32)])
    return model


def test_a_linear_model_is_certified_exactly_where_its_margin_exceeds_eps():
    model = _linear([[1.0, -1.0], [-1.0, 1.0]], [0.0, 0.0])  # z0 - z1 = 2 (x0 - x1); Linf dual: 4 eps
    x = np.array([[0.6, 0.4], [0.55, 0.5], [0.2, 0.7]], np.float32)
    y = np.array([0, 0, 1])
    got = _certified.certified_points(
        model, x, y, method="crown", eps=0.04, norm=np.inf, clip_values=None, batch_size=None
    )
    np.testing.assert_array_equal(got, np.abs(x[:, 0] - x[:, 1]) / 2 > 0.04)  # [True, False, True]


def test_a_vote_is_certified_by_its_certified_members_weight():
    a = _linear([[1.0, -1.0], [-1.0, 1.0]], [0.0, 0.0])  # class 0 iff x0 > x1
    b = _linear([[0.0, 0.0], [0.0, 0.0]], [1.0, 0.0])  # always class 0, certified at any eps
    c = _linear([[-1.0, 1.0], [1.0, -1.0]], [0.0, 0.0])  # class 1 iff x0 > x1
    x = np.array([[0.9, 0.1], [0.52, 0.48]], np.float32)
    y = np.array([0, 0])
    ensemble = WeightedEnsemble([a, b, c], [1.0, 1.0, 1.5])
    got = _certified.certified_points(
        ensemble, x, y, method="ibp", eps=0.05, norm=np.inf, clip_values=(0, 1), batch_size=None
    )
    # point 0: a and b certified for 0 (2.0) > c certified for 1 (1.5); point 1: a, c uncertified:
    # W_0 = 1 (b) is not above 0 + U = 2.5
    np.testing.assert_array_equal(got, [True, False])


def test_the_contradiction_flag_names_the_points():
    flag = _certified.contradicted(np.array([True, True, False]), np.array([True, False, False]), start=10)
    assert flag["name"] == "certificate_contradicted" and "indices 11" in flag["message"]
    assert _certified.contradicted(np.array([True, False]), np.array([True, False])) is None
    assert _certified.contradicted(None, np.array([True])) is None


def test_bad_methods_and_norms_are_refused_before_any_work():
    model = _linear(np.eye(2), [0.0, 0.0])
    with pytest.raises(ValueError, match="certify"):
        _certified.check_method("lp", np.inf, model)
    with pytest.raises(ValueError, match="Linf and L2"):
        _certified.check_method("ibp", 1.0, model)
    gelu = keras.Sequential([keras.Input((2,)), layers.Dense(2, activation="gelu", name="g")])
    with pytest.raises(ValueError, match="'g'"):
        _certified.check_method("crown", 2.0, gelu)
    assert _certified.check_method(None, 1.0, gelu) is None


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_evaluate_reports_certified_below_robust_with_its_interval(norm):
    import gradkit

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((6,)), layers.Dense(8, activation="relu"), layers.Dense(3, activation="softmax")]
    )
    x = np.random.RandomState(1).rand(24, 6).astype(np.float32)
    y = np.argmax(np.asarray(keras.ops.convert_to_numpy(model(x))), axis=1)
    eps = 0.02 if norm == "linf" else 0.05
    result = gradkit.evaluate(
        model,
        x,
        y,
        eps=eps,
        norm=norm,
        attacks=["apgd-ce"],
        steps=5,
        clip_values=(0, 1),
        certify="crown",
        verbose=0,
    )
    direct = gradkit.certify(model, x, y, eps, norm=norm, method="crown", clip_values=(0, 1)).certified
    np.testing.assert_array_equal(result.certified, direct)
    assert not np.any(result.certified & ~result.robust)  # certified points survive the attack
    assert 0 < result.certified_accuracy <= result.robust_accuracy
    record = result.to_dict()
    assert record["certified_accuracy"] == result.certified_accuracy and len(record["certified"]) == 24
    low, high = record["certified_interval"]
    assert low <= result.certified_accuracy <= high
    assert "certified accuracy" in result.summary()
    assert "certificate_contradicted" not in [f["name"] for f in result.flags]
