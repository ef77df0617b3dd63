"""The gradient noise scale ("noise_scale", `gradkit.monitor._noise_scale`): against tr(Sigma) / |G|^2
computed in numpy from per-sample gradients of a fixed softmax regression (McCandlish et al. 2018,
Appendix A.1)."""

import keras
import numpy as np
import pytest

from gradkit.monitor import GradientNormCallback, track_gradient_norm
from helpers.training import X, Y, mlp

N, D, K = 2048, 8, 3
_rng = np.random.RandomState(0)
XS = _rng.randn(N, D).astype(np.float32)
YS = np.argmax(XS @ _rng.randn(D, K) + 0.5 * _rng.randn(N, K), axis=1)
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def softmax_regression(learning_rate=0.0):
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(K, name="logits")])
    model.set_weights([0.1 * _rng.randn(D, K).astype(np.float32), np.zeros(K, np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss=LOSS)
    return model


def per_sample_gradients(model):
    """`(N, D * K + K)`: each row's gradient of its own loss, by hand (softmax cross-entropy)."""
    w, c = model.get_weights()
    logits = XS @ w + c
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    delta = p - np.eye(K)[YS]
    return np.concatenate([(XS[:, :, None] * delta[:, None, :]).reshape(N, -1), delta], axis=1).astype(
        np.float64
    )


def test_noise_scale_is_tr_sigma_over_squared_gradient_norm():
    model = softmax_regression()  # learning rate 0: the weights stay fixed, every batch sees the same G
    g = per_sample_gradients(model)
    mean = g.mean(axis=0)
    expected = np.sum((g - mean) ** 2) / N / np.sum(mean**2)  # B_simple = tr(Sigma) / |G|^2
    # 10 passes over the data in batches of 64, shuffled here (the same batches on every backend)
    order = np.concatenate([np.random.RandomState(e).permutation(N) for e in range(10)])
    callback = GradientNormCallback(include=("norm", "noise_scale"))
    history = model.fit(XS[order], YS[order], batch_size=64, shuffle=False, verbose=0, callbacks=[callback])
    assert 2 < expected < 64  # the batch of 64 is within the range the estimator resolves
    assert history.history["noise_scale"][-1] == pytest.approx(expected, rel=0.1)


def one_step_estimate(grads, g1, g2, b1, b, indices=None):
    """The ratio of the paper's two estimates from one batch (the mean over the halves' pairs)."""
    indices = range(len(grads)) if indices is None else indices

    def sq(arrays):
        return sum(float(np.sum(np.square(arrays[i], dtype=np.float64))) for i in indices)

    full, grad_sq, trace = sq(grads), 0.0, 0.0
    for b_small, small in ((b1, sq(g1)), (b - b1, sq(g2))):
        grad_sq += 0.5 * (b * full - b_small * small) / (b - b_small)
        trace += 0.5 * (small - full) / (1 / b_small - 1 / b)
    return trace / grad_sq


@pytest.mark.parametrize("rows", [8, 7])  # even and odd halves
def test_one_step_value_is_the_estimators_ratio_on_its_batch(rows, norm_path):
    import gradkit

    X2 = np.concatenate([X, X[::-1] * 0.5])[:rows]
    Y2 = np.concatenate([Y, Y[::-1]])[:rows]
    model = mlp(keras.optimizers.Adam(0.01))
    track_gradient_norm(model, per_layer=True, include=("updates", "noise_scale"))  # weights read after
    b1 = rows // 2
    grads = gradkit.weight_gradients(model, X2, Y2)
    g1 = gradkit.weight_gradients(model, X2[:b1], Y2[:b1])
    g2 = gradkit.weight_gradients(model, X2[b1:], Y2[b1:])
    logs = model.train_on_batch(X2, Y2, return_dict=True)  # one step: the bias-corrected average is it
    assert logs["noise_scale"] == pytest.approx(one_step_estimate(grads, g1, g2, b1, rows), rel=1e-3)
    for name, idx in {"hidden": [0, 1], "logits": [2, 3]}.items():
        expected = one_step_estimate(grads, g1, g2, b1, rows, idx)
        assert logs[f"noise_scale/{name}"] == pytest.approx(expected, rel=1e-3)


def test_a_batch_of_one_row_is_refused_before_any_update():
    model = softmax_regression(0.1)
    w0 = model.get_weights()
    with pytest.raises(
        ValueError, match="`include` must be without 'noise_scale' for batches of fewer than 2"
    ):
        model.fit(
            XS[:4], YS[:4], batch_size=1, verbose=0, callbacks=[GradientNormCallback(include="noise_scale")]
        )
    if keras.backend.backend() != "jax":  # JAX's fit leaves the variables it moved into its step state
        np.testing.assert_array_equal(
            model.get_weights()[0], w0[0]
        )  # (Keras restores them only after a step)
    model = softmax_regression(0.1)
    # A short last batch after full ones is no error: its step leaves the averages as they were.
    history = model.fit(
        XS[:5], YS[:5], batch_size=4, verbose=0, callbacks=[GradientNormCallback(include="noise_scale")]
    )
    assert np.isfinite(history.history["noise_scale"][0])


def test_callback_steps_hold_the_smoothed_values_as_logged():
    model = softmax_regression()
    callback = GradientNormCallback(include="noise_scale", every_n_steps=2)
    history = model.fit(
        XS[:256], YS[:256], batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[callback]
    )
    assert [len(v) for v in callback.steps["noise_scale"]] == [4, 4]  # steps 0, 2, 4, 6 of each epoch
    for epoch, values in enumerate(callback.steps["noise_scale"]):
        assert values[-1] == pytest.approx(history.history["noise_scale"][epoch], rel=1e-6)
    assert np.all(np.isfinite(callback.steps["noise_scale"][1]))
