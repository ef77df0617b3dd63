"""`AttackGradient.bind_decision` (`gradkit.gradients._attack_gradient`): the real decision on the device, the
argmax of one model and the weighted hard vote of an ensemble, as `predict` gives them."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.gradients import AttackGradient

from conftest import set_weights_from


def member(seed):
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, "tanh"), keras.layers.Dense(3, "softmax")]
    )
    return set_weights_from(model, seed=seed)


X = np.random.RandomState(0).rand(12, 4).astype("float32")


def test_bound_decision_is_the_hard_vote_and_the_argmax():
    members = [member(1), member(2), member(3)]
    for weights in ([0.5, 0.3, 0.4], [0.1, 0.1, 1.0]):
        ensemble = gradkit.WeightedEnsemble(members, weights)
        decision, rows = AttackGradient(ensemble, batch_size=16).bind_decision()
        assert rows == 16
        padded = np.concatenate([X, X[:4]])
        ids = backend.to_numpy(decision(backend.to_tensor(padded)))
        np.testing.assert_array_equal(ids[:12], ensemble.predict(X))
    expected = members[0].predict(X, verbose=0).argmax(axis=1)  # before binding: a bound call reads
    decision, _ = AttackGradient(members[0], batch_size=12).bind_decision()  # the values of that time
    np.testing.assert_array_equal(backend.to_numpy(decision(backend.to_tensor(X))), expected)


def test_bind_decision_needs_a_batch_size():
    with pytest.raises(ValueError, match="batch_size"):
        AttackGradient(member(0)).bind_decision()


def test_a_surrogates_new_weights_reach_the_compiled_gradient():
    """BPDA's gradient is the surrogate's at its current weights: on JAX its values were once baked into
    the compiled step at the first call. Hand value: d CE / dx = W_s (softmax(z_model) - onehot(y))."""
    inp = keras.Input((3,))
    model, surrogate = (
        keras.Model(inp, keras.layers.Dense(2)(inp)),
        keras.Model(inp, keras.layers.Dense(2)(inp)),
    )
    x, y = np.array([[1.0, -2.0, 0.5]], np.float32), np.array([0])
    grad = AttackGradient(model, surrogate=surrogate)
    grad(x, y)  # compiled with the surrogate's first weights
    w_s = np.array([[1.0, -1.0], [0.5, 2.0], [-3.0, 0.0]], np.float32)
    surrogate.layers[-1].set_weights([w_s, np.zeros(2, np.float32)])
    z = np.asarray(model.predict(x, verbose=0), np.float64)[0]
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    np.testing.assert_allclose(grad(x, y)[2][0], w_s @ (p - [1.0, 0.0]), rtol=1e-5, atol=1e-6)
