"""InputGradient on every backend: values against finite differences and a hand-written backward
pass, tracing, training mode, several inputs and outputs; and bad input, refused with a clear error
naming the argument before any work starts."""

import warnings

import keras
import numpy as np
import pytest

import gradkit

from conftest import BACKEND, central_difference, set_weights_from


def relu_mlp():
    """Input(4) -> Dense(8, relu) -> Dense(3) logits, weights from seed 1."""
    inp = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inp)
    model = keras.Model(inp, keras.layers.Dense(3)(hidden))
    set_weights_from(model, seed=1)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def numpy_logits(model, x):
    w1, b1, w2, b2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def numpy_ce(logits, y):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y]


# Two rows of four features and their labels: the inputs of most tests here.
X_PAIR = np.linspace(-1, 1, 8).reshape(2, 4).astype(np.float32)
Y_PAIR = np.array([0, 2])


def test_finite_difference_and_hand_computed():
    model = relu_mlp()
    grad = gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    assert grad.dtype == np.float32 and grad.shape == (2, 4)
    assert np.all(np.isfinite(grad)) and np.any(grad != 0)
    fd = central_difference(lambda x: numpy_ce(numpy_logits(model, x), Y_PAIR).sum(), X_PAIR)
    np.testing.assert_allclose(grad, fd, rtol=1e-3, atol=1e-6)
    # Hand-written backward pass in float64: the same on every backend to 1e-5.
    w1, b1, w2, b2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    pre = X_PAIR @ w1 + b1
    logits = np.maximum(pre, 0) @ w2 + b2
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d_logits = p - np.eye(3)[Y_PAIR]
    exact = ((d_logits @ w2.T) * (pre > 0)) @ w1.T
    np.testing.assert_allclose(grad, exact, atol=1e-5)


def test_symbolic_input_is_rejected():
    model = relu_mlp()
    with pytest.raises(TypeError, match="concrete arrays"):
        gradkit.input_gradient(model, model.input, Y_PAIR)


def test_integer_inputs_rejected_but_weight_gradients_work():
    inp = keras.Input((3,), dtype="int32")
    emb = keras.layers.Embedding(10, 4)(inp)
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(emb)))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.array([[1, 2, 3]], dtype=np.int32)
    with pytest.raises(TypeError, match="floating input.*int32.*embedding"):
        gradkit.input_gradient(model, x, [1])
    grads = gradkit.weight_gradients(model, x, [1])
    table = grads[0]
    assert table.shape == (10, 4)
    nonzero_rows = np.flatnonzero(np.abs(table).sum(axis=1))
    np.testing.assert_array_equal(nonzero_rows, [1, 2, 3])


def test_no_retracing_and_padded_last_batch_equals_alone():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    set_weights_from(model, seed=2)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(0)
    x = rng.rand(100, 5).astype(np.float32)
    y = rng.randint(0, 3, 100)
    fn = gradkit.InputGradient(model, batch_size=32)
    for _ in range(3):
        full = fn(x, y)
    for _ in range(20):
        fn(rng.rand(32, 5).astype(np.float32), rng.randint(0, 3, 32))
    assert fn.trace_count == 1
    alone = gradkit.InputGradient(model)(x[96:], y[96:])
    np.testing.assert_allclose(full[96:], alone, rtol=1e-6, atol=1e-7)
    # Batching does not change any row.
    np.testing.assert_allclose(full, gradkit.InputGradient(model)(x, y), rtol=1e-5, atol=1e-7)


def test_training_after_first_call_is_seen_without_recompiling():
    model = relu_mlp()
    model.compile(
        optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    fn = gradkit.InputGradient(model)
    before = fn(X_PAIR, Y_PAIR)
    model.fit(np.random.rand(16, 4).astype("float32"), np.random.randint(0, 3, 16), epochs=2, verbose=0)
    after = fn(X_PAIR, Y_PAIR)
    assert not np.allclose(before, after)
    expected = gradkit.InputGradient(model)(X_PAIR, Y_PAIR)
    np.testing.assert_allclose(after, expected, rtol=1e-6)
    assert fn.trace_count == 1


def test_saturated_softmax_uses_logits_on_every_backend():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    kernel = np.eye(4, 3, dtype=np.float32) * 100
    model.set_weights([kernel, np.zeros(3, np.float32)])
    model.compile(loss="sparse_categorical_crossentropy")
    y = np.array([1, 1])
    grad = gradkit.input_gradient(model, X_PAIR, y)
    # softmax(100 x) is one-hot in float32; from the logits the gradient is (p - onehot) W^T.
    np.testing.assert_allclose(grad, [[0, -100, 100, 0], [0, -100, 100, 0]], atol=1e-3)


def test_saturated_softmax_of_a_nested_model_uses_logits_on_every_backend():
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    inner.set_weights([np.eye(4, 3, dtype=np.float32) * 100, np.zeros(3, np.float32)])
    inputs = keras.Input((4,))
    model = keras.Model(inputs, inner(inputs))
    model.compile(loss="sparse_categorical_crossentropy")
    grad = gradkit.input_gradient(model, X_PAIR, np.array([1, 1]))
    np.testing.assert_allclose(grad, [[0, -100, 100, 0], [0, -100, 100, 0]], atol=1e-3)


def test_softmax_layer_and_one_hot_labels_agree_with_ids():
    inp = keras.Input((4,))
    logits = keras.layers.Dense(3)(inp)
    model = keras.Model(inp, keras.layers.Softmax()(logits))
    set_weights_from(model, seed=3)
    model.compile(loss="categorical_crossentropy")
    ids = gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    onehot = gradkit.input_gradient(model, X_PAIR, np.eye(3)[Y_PAIR])
    np.testing.assert_array_equal(ids, onehot)
    w, b = [np.asarray(v, np.float64) for v in model.get_weights()]
    z = X_PAIR @ w + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(ids, (p - np.eye(3)[Y_PAIR]) @ w.T, atol=1e-5)


def test_soft_labels_rejected():
    model = relu_mlp()
    with pytest.raises(ValueError, match="soft probability"):
        gradkit.input_gradient(model, X_PAIR, [[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])


def test_inference_mode_changes_nothing():
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    h = keras.layers.Dropout(0.5, seed=0)(h)
    h = keras.layers.BatchNormalization()(h)
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [np.array(v) for v in model.variables]
    first = gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    second = gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    np.testing.assert_array_equal(first, second)
    train_mode = gradkit.InputGradient(model, training=True)(X_PAIR, Y_PAIR)
    assert np.all(np.isfinite(train_mode))
    for old, new in zip(before, model.variables):
        np.testing.assert_array_equal(old, np.array(new))


@pytest.mark.parametrize("seed", [None, 3])
def test_training_mode_draws_one_dropout_mask_or_warns(seed):
    """training=True holds the seed state fixed: every call draws the same Dropout mask. On PyTorch a
    Dropout made without `seed=` draws from torch's global generator (Keras' fast path), a new mask
    per call: gradkit says so instead of promising the same mask."""
    inp = keras.Input((4,))
    h = keras.layers.Dropout(0.5, seed=seed)(keras.layers.Dense(64, activation="relu")(inp))
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    unseeded = seed is None and BACKEND == "torch"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grad = gradkit.InputGradient(model, training=True)
    messages = [str(w.message) for w in caught if "made without `seed=`" in str(w.message)]
    assert len(messages) == int(unseeded) and all("'dropout" in m for m in messages)
    first, second = grad(X_PAIR, Y_PAIR), grad(X_PAIR, Y_PAIR)
    assert np.array_equal(first, second) != unseeded
    assert not np.allclose(first, gradkit.input_gradient(model, X_PAIR, Y_PAIR))  # a mask was applied


def test_sample_weight_scales_rows():
    model = relu_mlp()
    base = gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    weighted = gradkit.input_gradient(model, X_PAIR, Y_PAIR, sample_weight=[2.0, 0.0])
    np.testing.assert_allclose(weighted, base * np.array([[2.0], [0.0]]), rtol=1e-6)


def test_argmax_loss_is_a_clear_error():
    model = relu_mlp()

    def argmax_loss(y_true, y_pred):
        return keras.ops.cast(keras.ops.argmax(y_pred, axis=-1), "float32")

    with pytest.raises(gradkit.DisconnectedGradientError, match="does not depend"):
        gradkit.input_gradient(model, X_PAIR, Y_PAIR, loss=argmax_loss)


def test_multi_input_multi_output_structure():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Dense(4)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], [keras.layers.Dense(3, name="cls")(h), keras.layers.Dense(1, name="aux")(h)])
    set_weights_from(model, seed=4)
    rng = np.random.RandomState(0)
    xa, xb = rng.rand(6, 3).astype("float32"), rng.rand(6, 2).astype("float32")
    y = rng.randint(0, 3, 6)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ga, gb = gradkit.input_gradient(model, [xa, xb], y, loss=loss, output="cls")
    assert ga.shape == (6, 3) and gb.shape == (6, 2)
    as_dict = gradkit.input_gradient(model, {"a": xa, "b": xb}, y, loss=loss, output=0)
    np.testing.assert_allclose(as_dict["a"], ga, rtol=1e-6)
    # Only the cls head counts: equal to the gradient through a model of that head alone.
    head = keras.Model([a, b], model.get_layer("cls").output)
    ha, hb = gradkit.input_gradient(head, [xa, xb], y, loss=loss)
    np.testing.assert_allclose(ga, ha, rtol=1e-5)
    with pytest.raises(ValueError, match="output="):
        gradkit.input_gradient(model, [xa, xb], y, loss=loss)
    with pytest.raises(ValueError, match="`output` must be one of"):
        gradkit.input_gradient(model, [xa, xb], y, loss=loss, output="nope")


@pytest.mark.skipif(BACKEND != "torch", reason="torch-specific: no requires_grad left on the weights")
def test_torch_weights_untouched():
    model = relu_mlp()
    flags = [v.value.requires_grad for v in model.trainable_variables]
    gradkit.input_gradient(model, X_PAIR, Y_PAIR)
    assert flags == [v.value.requires_grad for v in model.trainable_variables]


@pytest.mark.skipif(BACKEND != "tensorflow", reason="a TensorFlow log message; other backends have none")
def test_one_function_per_model_logs_no_retracing_warning():
    # TensorFlow counts traces per code object: seven models' gradients, each traced once, read to it
    # as one function retraced seven times ("... triggered tf.function retracing").
    import logging

    import tensorflow as tf

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    tf.get_logger().addHandler(handler)
    try:
        for seed in range(7):
            model = relu_mlp()
            set_weights_from(model, seed=seed)
            grad = gradkit.InputGradient(model)
            grad(X_PAIR, Y_PAIR)
            assert grad.trace_count == 1
    finally:
        tf.get_logger().removeHandler(handler)
    assert not [r for r in records if "retracing" in r.getMessage()]


# Bad input raises a clear error naming the argument, before any work starts.
@pytest.fixture
def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    set_weights_from(m)
    m.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


X = np.random.RandomState(0).rand(3, 4).astype(np.float32)


@pytest.mark.parametrize(
    "x, y, kwargs, error, match",
    [
        (X, [0, 1], {}, ValueError, "one row per sample"),
        (X[:, :3], [0, 1, 2], {}, ValueError, "feature shape"),
        (np.where(np.eye(3, 4) > 0, np.nan, X), [0, 1, 2], {}, ValueError, "NaN or inf"),
        (X.astype(np.int64), [0, 1, 2], {}, TypeError, "floating input"),
        (X, [0, 1, 3], {}, ValueError, r"outside \[0, 2\]"),
        (X, [0, 1, 1.5], {}, ValueError, r"integer class ids\. Received: 1 non-integer .*y\[2\]=.*1\.5"),
        (X, np.array(["0", "1", "2"]), {}, TypeError, "`y` must be a numeric array.*<U1"),
        (X, np.zeros((3, 2)), {}, ValueError, r"class ids of shape \(n,\).*y.shape=\(3, 2\)"),
        (X.tolist(), [0, 1, 2], {}, ValueError, r"Received: 3 \(a list or tuple is read as one array per"),
        (X, None, {}, ValueError, "`y` is required"),
        (X, [0, 1, 2], {"sample_weight": [1.0, -1.0, 1.0]}, ValueError, "sample_weight"),
        (X, [0, 1, 2], {"sample_weight": [1.0, 1.0]}, ValueError, "sample_weight"),
        (X, [0, 1, 2], {"batch_size": 0}, ValueError, "batch_size"),
        (np.zeros((0, 4), np.float32), [], {}, ValueError, "non-empty"),
        (X, [0, 1, 2], {"loss": 3}, TypeError, "`loss` must be"),
    ],
)
def test_input_gradient_errors(model, x, y, kwargs, error, match):
    with pytest.raises(error, match=match):
        gradkit.input_gradient(model, x, y, **kwargs)


def test_uncompiled_model_without_loss(model):
    bare = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="loss="):
        gradkit.InputGradient(bare)


def test_not_a_model():
    with pytest.raises(TypeError, match="keras.Model"):
        gradkit.InputGradient("model")


def test_float64_input_is_cast_and_traced_once(model):
    fn = gradkit.InputGradient(model)
    g32 = fn(X, [0, 1, 2])
    g64 = fn(X.astype(np.float64), [0, 1, 2])
    np.testing.assert_array_equal(g32, g64)
    assert fn.trace_count == 1


def test_multi_label_binary_targets_rejected_by_input_gradients():
    # weight gradients take multi-label targets as fit does (tests/gradients/test_losses.py);
    # input gradients and attacks are for single-label classifiers and say so
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="sigmoid")])
    model.compile(loss="binary_crossentropy")
    with pytest.raises(ValueError, match="multi-label"):
        gradkit.input_gradient(model, X, np.zeros((3, 2)))


def test_non_default_reduction_rejected(model):
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    with pytest.raises(ValueError, match="reduction='sum'"):
        gradkit.weight_gradients(model, X, [0, 1, 2], loss=loss)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        return self.dense(x)


def test_subclassed_model_labels_are_checked_against_its_traced_class_count():
    model = Subclassed()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model(X)
    for fn in (gradkit.input_gradient, gradkit.weight_gradients):
        with pytest.raises(ValueError, match=r"outside \[0, 2\]. Received: min=0, max=7"):
            fn(model, X, [0, 7, 1])
    assert gradkit.input_gradient(model, X, [0, 2, 1]).shape == (3, 4)
