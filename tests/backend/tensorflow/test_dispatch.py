"""TensorFlow's step dispatch (`backend.tensorflow.dispatch.dispatcher`): the concrete function of each
argument signature, called on the flattened tensors, gives the `tf.function`'s own outputs and traces as
often."""

import keras
import numpy as np
import pytest

if keras.backend.backend() != "tensorflow":
    pytest.skip("TensorFlow's dispatch of compiled steps", allow_module_level=True)

import tensorflow as tf  # noqa: E402

from gradkit.backend.tensorflow.dispatch import dispatcher  # noqa: E402


def _function():
    traces = []

    @tf.function(autograph=False)
    def step(weights, state, fixed):
        traces.append(1)
        y, targets = fixed["y"]
        out = dict(state, x=state["x"] * fixed["scale"] + tf.reduce_sum(weights[0]))
        out["n"] = state["n"] + tf.reduce_sum(y) + (0 if targets is None else tf.reduce_sum(targets))
        return out

    return step, traces


def _args(rows, targets=True):
    rng = np.random.default_rng(rows)
    weights = [tf.Variable(rng.normal(size=(3, 2)).astype(np.float32))]
    y = tf.constant(np.arange(rows, dtype=np.int32))
    state = {"x": tf.constant(rng.normal(size=(rows, 4)).astype(np.float32)), "n": tf.constant(0, tf.int32)}
    fixed = {"scale": tf.constant(np.float32(1.5)), "y": (y, y + 1 if targets else None)}
    return weights, state, fixed


def test_outputs_and_traces_match_the_tf_function():
    step, traces = _function()
    fast = dispatcher(step)
    for rows, targets in [(5, True), (5, True), (7, True), (5, False), (7, True), (5, False)]:
        args = _args(rows, targets)
        got, want = fast(*args), step(*args)
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
    assert len(traces) == 3  # (5, targets), (7, targets), (5, None): one trace each, shared with the function


def test_state_carried_through_calls():
    step, traces = _function()
    fast = dispatcher(step)
    weights, state, fixed = _args(4)
    expected = dict(state)
    for _ in range(3):
        state, expected = fast(weights, state, fixed), step(weights, expected, fixed)
    np.testing.assert_array_equal(state["x"].numpy(), expected["x"].numpy())
    assert int(state["n"]) == int(expected["n"]) == 3 * (6 + 10) and len(traces) == 1


def test_other_leaves_go_through_the_function():
    @tf.function(autograph=False)
    def scaled(x, factor):
        return x * factor

    fast = dispatcher(scaled)
    x = tf.constant([1.0, 2.0])
    np.testing.assert_array_equal(fast(x, 3.0).numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(fast(x, 2.0).numpy(), [2.0, 4.0])


def test_a_variable_given_twice_is_one_input():
    @tf.function(autograph=False)
    def both(weights, fixed):
        return weights[0] * 2.0 + fixed["variables"][0] - fixed["x"]

    fast = dispatcher(both)
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([10.0, 20.0])
    x = tf.constant([0.5, 0.5])
    for weights, again in [([a], [a]), ([a], [b]), ([b], [b]), ([a], [a])]:
        got = fast(weights, {"variables": again, "x": x})
        np.testing.assert_array_equal(got.numpy(), both(weights, {"variables": again, "x": x}).numpy())
