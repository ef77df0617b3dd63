"""What `evaluate` attacks (`gradkit.evaluation._single`): a model of one input array and one output. Any
other is refused before any work, with the one-input or one-output model to build, and that model, built as
the message says, evaluates to the head's own result."""

import re

import keras
import numpy as np
import pytest

import gradkit

OPTIONS = dict(eps=0.1, attacks=["fgsm"], clip_values=(0.0, 1.0), verbose=0)


def _data(n=16, d=6):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (n, d)).astype("float32")
    return x, (x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5)


def _two_outputs():
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="tanh")(inp)
    aux = keras.layers.Dense(1, name="aux")(hidden)
    cls = keras.layers.Dense(4, name="cls")(hidden)
    return keras.Model(inp, [aux, cls])


def test_a_model_of_two_outputs_is_refused_with_the_head_to_build():
    x, y = _data()
    model = _two_outputs()
    with pytest.raises(
        ValueError, match="`model` must have one output: evaluate attacks one classifier head"
    ) as err:
        gradkit.evaluate(model, x, y, **OPTIONS)
    message = str(err.value)
    assert "2 outputs of shapes (None, 1), (None, 4)" in message and "output=" not in message
    head = int(re.search(r"keras\.Model\(model\.inputs, model\.outputs\[(\d)\]\)", message).group(1))
    assert head == 1  # the classifier head, as the message names it
    one = keras.Model(model.inputs, model.outputs[head])
    result = gradkit.evaluate(one, x, y, **OPTIONS)
    logits = model.predict(x, verbose=0)[1]
    assert result.clean_accuracy == np.mean(np.argmax(logits, axis=1) == y)
    with pytest.raises(ValueError, match="must have one output"):  # a member of an ensemble too
        gradkit.evaluate(gradkit.WeightedEnsemble([model, model]), x, y, **OPTIONS)


def _two_inputs():
    keras.utils.set_random_seed(0)
    a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([b, a]))
    return keras.Model([a, b], keras.layers.Dense(4)(hidden))


def test_a_model_of_two_inputs_is_refused_with_the_one_input_model_to_build():
    x, y = _data()
    model = _two_inputs()
    with pytest.raises(
        ValueError, match="`model` must have one input: evaluate attacks models of one"
    ) as err:
        gradkit.evaluate(model, x, y, **OPTIONS)  # one array (the .npz's x) for two inputs
    message = str(err.value)
    assert message.endswith(
        "; or pass x as a list or dict of its input arrays (attack_inputs= names those attacked)"
    )
    assert "2 inputs of shapes (None, 4), (None, 2)" in message
    example = "one = keras.Input((6,)); wrapped = keras.Model(one, model([one[:, 0:4], one[:, 4:6]]))"
    assert example in message
    one = keras.Input((6,))
    wrapped = keras.Model(one, model([one[:, 0:4], one[:, 4:6]]))  # as the message says
    result = gradkit.evaluate(wrapped, np.concatenate([x[:, :4], x[:, 4:]], axis=1), y, **OPTIONS)
    logits = model.predict([x[:, :4], x[:, 4:]], verbose=0)
    assert result.clean_accuracy == np.mean(np.argmax(logits, axis=1) == y)
    several = gradkit.evaluate(model, [x[:, :4], x[:, 4:]], y, **OPTIONS)  # one array per input: the same
    np.testing.assert_array_equal(several.robust, result.robust)
    np.testing.assert_array_equal(np.concatenate(several.x_adv, axis=1), result.x_adv)
    several = gradkit.evaluate(model, [x[:, :4], x[:, 4:]], y, **OPTIONS)  # one array per input: the same
    np.testing.assert_array_equal(several.robust, result.robust)
    np.testing.assert_array_equal(np.concatenate(several.x_adv, axis=1), result.x_adv)
