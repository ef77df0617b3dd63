"""`WeightedEnsemble` (`gradkit.gradients._ensemble`): linearity of the input gradient, prediction, argument
checks."""

import keras
import numpy as np
import pytest

import gradkit

from conftest import set_weights_from


def member(seed):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, "tanh"), keras.layers.Dense(3)])
    set_weights_from(model, seed=seed)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


X = np.random.RandomState(0).rand(5, 4).astype(np.float32)
Y = np.array([0, 1, 2, 1, 0])


def test_weights_one_zero_equal_first_member():
    m1, m2 = member(1), member(2)
    ens = gradkit.InputGradient(gradkit.WeightedEnsemble([m1, m2], [1.0, 0.0]))(X, Y)
    np.testing.assert_allclose(ens, gradkit.input_gradient(m1, X, Y), rtol=1e-6, atol=1e-7)


def test_two_copies_half_weights_equal_model():
    m = member(3)
    ens = gradkit.InputGradient(gradkit.WeightedEnsemble([m, m], [0.5, 0.5]))(X, Y)
    np.testing.assert_allclose(ens, gradkit.input_gradient(m, X, Y), rtol=1e-5, atol=1e-7)


def test_weighted_sum_of_member_gradients():
    models, alpha = [member(4), member(5), member(6)], [0.2, 1.5, 0.7]
    fn = gradkit.InputGradient(gradkit.WeightedEnsemble(models, alpha))
    expected = sum(a * gradkit.input_gradient(m, X, Y) for m, a in zip(models, alpha))
    np.testing.assert_allclose(fn(X, Y), expected, rtol=1e-5, atol=1e-6)
    assert fn.trace_count == 1  # one compiled function for all members


def test_normalized_member_gradients():
    m1, m2 = member(7), member(8)
    fn = gradkit.InputGradient(gradkit.WeightedEnsemble([m1, m2], [1.0, 3.0], normalize_gradients=True))
    g1, g2 = gradkit.input_gradient(m1, X, Y), gradkit.input_gradient(m2, X, Y)
    unit = lambda g: g / np.linalg.norm(g, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(fn(X, Y), unit(g1) + 3.0 * unit(g2), rtol=1e-5, atol=1e-6)


def test_predictions_hard_and_soft():
    m1, m2 = member(9), member(10)
    ens = gradkit.WeightedEnsemble([m1, m2], [0.25, 0.75])
    softmax = lambda z: np.exp(z) / np.exp(z).sum(1, keepdims=True)  # noqa: E731
    p1, p2 = softmax(m1.predict(X, verbose=0)), softmax(m2.predict(X, verbose=0))
    np.testing.assert_allclose(ens.predict_proba(X), 0.25 * p1 + 0.75 * p2, rtol=1e-5)
    votes = 0.25 * np.eye(3)[p1.argmax(1)] + 0.75 * np.eye(3)[p2.argmax(1)]
    np.testing.assert_array_equal(ens.predict(X), votes.argmax(1))
    np.testing.assert_array_equal(ens.predict(X, voting="soft"), (0.25 * p1 + 0.75 * p2).argmax(1))
    with pytest.raises(ValueError, match="voting"):
        ens.predict(X, voting="median")


@pytest.mark.parametrize(
    "models, weights, error, match",
    [
        ([], None, ValueError, "at least one"),
        (["not a model"], None, TypeError, "keras.Model"),
        (None, [1.0], ValueError, "one entry per model"),
        (None, [1.0, -0.5], ValueError, ">= 0"),
        (None, [0.0, 0.0], ValueError, "not all zero"),
        (None, [1.0, np.nan], ValueError, "finite"),
        ("four classes", None, ValueError, r"`models\[1\]` has outputs of shape \[\(4,\)\].*\[\(3,\)\]"),
        ("five features", None, ValueError, r"`models\[1\]` has inputs of shape \[\(5,\)\].*\[\(4,\)\]"),
    ],
)
def test_bad_arguments(models, weights, error, match):
    other = {"four classes": ((4,), 4), "five features": ((5,), 3)}.get(
        models if isinstance(models, str) else ""
    )
    if other:
        odd = keras.Sequential([keras.Input(other[0]), keras.layers.Dense(other[1])])
        models = [member(1), odd]
    models = [member(1), member(2)] if models is None else models
    with pytest.raises(error, match=match):
        gradkit.WeightedEnsemble(models, weights)


def test_single_sigmoid_unit_members_vote_on_two_classes():
    models = []
    for sign in (1.0, -1.0):
        m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, activation="sigmoid")])
        m.set_weights([np.array([[sign * 5.0]], np.float32), np.zeros(1, np.float32)])
        m.compile(loss="binary_crossentropy")
        models.append(m)
    x = np.array([[-1.0], [1.0]], np.float32)
    ens = gradkit.WeightedEnsemble(models, [0.8, 0.2])
    np.testing.assert_array_equal(ens.predict(x), [0, 1])  # the heavier member decides
    p = 1 / (1 + np.exp(-5.0 * x[:, 0]))
    expected = 0.8 * np.stack([1 - p, p], 1) + 0.2 * np.stack([p, 1 - p], 1)
    np.testing.assert_allclose(ens.predict_proba(x), expected, rtol=1e-5)


def two_heads(seed):
    inputs = keras.Input((4,))
    heads = [keras.layers.Dense(3, name="a")(inputs), keras.layers.Dense(2, name="b")(inputs)]
    model = set_weights_from(keras.Model(inputs, heads), seed=seed)
    model.compile(loss={"a": "mse", "b": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    return model


def test_predict_uses_the_named_output_and_refuses_a_silent_choice():
    m1, m2, m3 = two_heads(11), two_heads(12), two_heads(13)
    ens = gradkit.WeightedEnsemble([m1, m2, m3], [0.3, 0.3, 0.5])
    heads = [m.predict(X, verbose=0)[1] for m in (m1, m2, m3)]  # output "b", 2 classes
    votes = sum(w * np.eye(2)[h.argmax(1)] for w, h in zip(ens.weights, heads))
    np.testing.assert_array_equal(ens.predict(X, output="b"), votes.argmax(1))
    np.testing.assert_array_equal(ens.predict(X, output=1), votes.argmax(1))
    assert ens.decision_function(X, output="b").shape == (len(X), 2)
    with pytest.raises(ValueError, match="output"):
        ens.predict(X)  # two outputs: which one must be said
    with pytest.raises(ValueError, match="output"):
        ens.predict(X, output="c")


def test_attack_labels_are_the_ensemble_vote_of_the_attacked_output():
    m1, m2 = two_heads(14), two_heads(15)
    ens = gradkit.WeightedEnsemble([m1, m2], [0.4, 0.6])
    grad = gradkit.InputGradient(ens, output="b")
    from gradkit import attacks as _base

    np.testing.assert_array_equal(_base.predict_labels(grad, X), ens.predict(X, output="b"))


def test_flags_must_be_bools():
    with pytest.raises(TypeError, match="`normalize_gradients` must be True or False"):
        gradkit.WeightedEnsemble([member(1)], normalize_gradients="yes")
    with pytest.raises(TypeError, match="`training` must be True or False. Received: training='no'"):
        gradkit.InputGradient(member(1), training="no")
    with pytest.raises(TypeError, match="`include_regularization` must be True or False"):
        gradkit.WeightGradient(member(1), include_regularization=1)
