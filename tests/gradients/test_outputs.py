"""Models with several outputs (`gradkit.gradients._outputs`): heads found by name (dict keys, output layer
names), never by position.

Most tests take a dict of two heads built in an order other than alphabetical (Keras orders dict outputs
differently across versions, keras#20596, #20346), compiled with per-output losses and loss weights.
"""

import re

import keras
import numpy as np
import pytest

import gradkit
from gradkit.gradients import predict_classes

from conftest import set_weights_from

RNG = np.random.RandomState(0)
X = RNG.rand(5, 4).astype("float32")
Y_CLS = np.array([0, 2, 1, 0, 2])
Y_AUX = RNG.rand(5, 1).astype("float32")


def dict_model(compile=True):
    """Input(4) -> Dense(6, tanh) -> {"cls": Dense(3) logits, "aux": Dense(1)}, the dict in that order."""
    inp = keras.Input((4,), name="x")
    hidden = keras.layers.Dense(6, activation="tanh", name="hidden")(inp)
    heads = {
        "cls": keras.layers.Dense(3, name="cls")(hidden),
        "aux": keras.layers.Dense(1, name="aux")(hidden),
    }
    model = set_weights_from(keras.Model(inp, heads), seed=3)
    if compile:
        model.compile(
            loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "aux": "mse"},
            loss_weights={"cls": 1.0, "aux": 0.5},
            optimizer=keras.optimizers.SGD(learning_rate=1.0),
        )
    return model


def weights_of(model):
    return {v.path: np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in model.weights}


def hand_cls_gradient(model, x, y):
    """Backward pass by hand of the cls head's summed cross-entropy w.r.t. x (float64)."""
    w = weights_of(model)
    h = np.tanh(x @ w["hidden/kernel"] + w["hidden/bias"])
    z = h @ w["cls/kernel"] + w["cls/bias"]
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = p - np.eye(3)[y]
    return ((dz @ w["cls/kernel"].T) * (1 - h**2)) @ w["hidden/kernel"].T


def test_input_gradient_of_the_named_head():
    model = dict_model()
    grad = gradkit.input_gradient(model, X, Y_CLS, output="cls")
    np.testing.assert_allclose(grad, hand_cls_gradient(model, X, Y_CLS), rtol=1e-5, atol=1e-6)
    by_layer_index = gradkit.input_gradient(model, X, Y_CLS, output=model.output_names.index("cls"))
    np.testing.assert_allclose(by_layer_index, grad, rtol=1e-6)
    aux = gradkit.input_gradient(model, X, Y_AUX, output="aux")  # mse of the aux head, summed
    w = weights_of(model)
    h = np.tanh(X @ w["hidden/kernel"] + w["hidden/bias"])
    residual = 2 * (h @ w["aux/kernel"] + w["aux/bias"] - Y_AUX)
    expected = ((residual @ w["aux/kernel"].T) * (1 - h**2)) @ w["hidden/kernel"].T
    np.testing.assert_allclose(aux, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
def test_attacks_on_the_named_head(attack):
    model = dict_model()
    eps = 0.1
    expected = np.clip(X + eps * np.sign(hand_cls_gradient(model, X, Y_CLS)), 0.0, 1.0)
    kwargs = dict(eps=eps, clip_values=(0.0, 1.0), output="cls")
    if attack == "pgd":
        kwargs.update(eps_step=eps, steps=1, random_start=False)
    adv = getattr(gradkit, attack)(model, X, Y_CLS, **kwargs)
    np.testing.assert_allclose(adv, expected, atol=1e-6)


def test_weight_gradients_of_both_heads_equal_the_update_fit_applies():
    model = dict_model()
    y = {"cls": Y_CLS, "aux": Y_AUX}
    grads = gradkit.weight_gradients(model, X, y)
    norm = gradkit.gradient_norm(model, X, y)
    gradkit.track_gradient_norm(model)
    before = [np.array(w) for w in model.get_weights()]
    logs = model.train_on_batch(X, y, return_dict=True)
    update = [b - a for b, a in zip(before, model.get_weights())]  # SGD(learning_rate=1): the gradient
    assert [g.shape for g in grads] == [u.shape for u in update]
    for g, u in zip(grads, update):
        np.testing.assert_allclose(g, u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        norm, np.sqrt(sum(np.sum(u.astype(np.float64) ** 2) for u in update)), rtol=1e-5
    )
    np.testing.assert_allclose(logs["grad_norm"], norm, rtol=1e-5)
    # loss_weights count: without them the aux head's share doubles
    assert not np.allclose(gradkit.weight_gradients(model, X, y, output="cls")[0], grads[0], rtol=1e-3)


def test_weight_gradients_of_one_named_head():
    model = dict_model()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    grads = gradkit.weight_gradients(model, X, Y_CLS, output="cls", loss=loss)
    single = keras.Model(model.inputs, model.get_layer("cls").output)
    single.compile(loss=loss)
    expected = dict(
        zip([v.path for v in single.trainable_weights], gradkit.weight_gradients(single, X, Y_CLS))
    )
    for v, g in zip(model.trainable_weights, grads):
        if v.path.startswith("aux/"):
            np.testing.assert_array_equal(g, 0.0)
        else:
            np.testing.assert_allclose(g, expected[v.path], rtol=1e-5, atol=1e-7)


def test_list_of_two_outputs_by_index_or_layer_name():
    inp = keras.Input((4,))
    hidden = keras.layers.Dense(6, activation="tanh", name="hidden")(inp)
    model = keras.Model(
        inp, [keras.layers.Dense(1, name="aux")(hidden), keras.layers.Dense(3, name="cls")(hidden)]
    )
    set_weights_from(model, seed=3)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    by_name = gradkit.input_gradient(model, X, Y_CLS, output="cls", loss=loss)
    by_index = gradkit.input_gradient(model, X, Y_CLS, output=1, loss=loss)
    np.testing.assert_allclose(by_name, hand_cls_gradient(model, X, Y_CLS), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(by_index, by_name)


def test_unknown_output_name_lists_names_and_shapes():
    model = dict_model()
    for fn in (gradkit.input_gradient, gradkit.weight_gradients):
        with pytest.raises(
            ValueError, match=r"`output`.*'aux' \(shape \(None, 1\)\).*'cls' \(shape \(None, 3\)\)"
        ):
            fn(model, X, Y_CLS, output="nope")
    with pytest.raises(ValueError, match="Received: output='nope'"):
        gradkit.fgsm(model, X, Y_CLS, eps=0.1, output="nope")
    with pytest.raises(
        ValueError, match=r"'cls' \(shape \(None, 3\)\): say which one .* with `output=`"
    ) as err:
        gradkit.input_gradient(model, X, Y_CLS)
    head = int(re.search(r"model\.outputs\[(\d)\]", str(err.value)).group(1))  # the example runs as it says
    assert model.outputs[head].shape[-1] == 3
    one = keras.Model(model.inputs, model.outputs[head])
    np.testing.assert_array_equal(predict_classes(one, X), predict_classes(model, X, output="cls"))


def test_dict_keys_other_than_layer_names():
    """The dict's keys name the heads (Keras names the compiled losses by them); the layers' own names
    are accepted too."""
    inp = keras.Input((4,))
    hidden = keras.layers.Dense(6, activation="tanh", name="hidden")(inp)
    heads = {
        "zeta": keras.layers.Dense(3, name="cls")(hidden),
        "alpha": keras.layers.Dense(1, name="aux")(hidden),
    }
    model = set_weights_from(keras.Model(inp, heads), seed=3)
    model.compile(
        loss={"zeta": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "alpha": "mse"},
        loss_weights={"zeta": 1.0, "alpha": 0.5},
        optimizer=keras.optimizers.SGD(learning_rate=1.0),
    )
    expected = hand_cls_gradient(model, X, Y_CLS)
    np.testing.assert_allclose(
        gradkit.input_gradient(model, X, Y_CLS, output="zeta"), expected, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        gradkit.input_gradient(model, X, Y_CLS, output="cls"), expected, rtol=1e-5, atol=1e-6
    )
    y = {"zeta": Y_CLS, "alpha": Y_AUX}
    grads = gradkit.weight_gradients(model, X, y)
    before = [np.array(w) for w in model.get_weights()]
    model.train_on_batch(X, y)
    for g, b, a in zip(grads, before, model.get_weights()):
        np.testing.assert_allclose(g, b - a, rtol=1e-5, atol=1e-6)
