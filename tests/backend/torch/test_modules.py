"""Keras models wrapping PyTorch modules (`keras.layers.TorchModuleWrapper`, PyTorch backend only;
`gradkit.backend.torch.modules`).

Under Keras' stateless call a wrapped module reads its own parameters (keras#20279); gradkit's gradients
must still equal torch autograd on the module and the update `fit` applies, and the noise scale of a step
the estimate from the halves' gradients.
"""

import keras
import numpy as np
import pytest

import gradkit

from conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="TorchModuleWrapper exists on PyTorch only")

RNG = np.random.RandomState(0)
X = RNG.rand(6, 4).astype("float32")
Y = np.array([0, 1, 2, 0, 1, 2])


def wrapped_model(batchnorm=False):
    """Input(4) -> TorchModuleWrapper(Linear(4, 5), [BatchNorm1d(5)], Tanh) -> Dense(3) logits, SGD(1)."""
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 5)] + ([torch.nn.BatchNorm1d(5)] if batchnorm else []) + [torch.nn.Tanh()]
    module = torch.nn.Sequential(*layers)
    inp = keras.Input((4,))
    hidden = keras.layers.TorchModuleWrapper(module, output_shape=(None, 5), name="wrapped")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(hidden))
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(learning_rate=1.0),
    )
    return model, module


def autograd(model, x, y, wrt, reduction="mean"):
    """Gradients by torch autograd of the cross-entropy of the model's own (stateful) call."""
    import torch

    x = torch.tensor(x, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor(y), reduction=reduction)
    targets = [x] if wrt == "x" else [v.value for v in model.trainable_variables]
    return [g.detach().numpy() for g in torch.autograd.grad(loss, targets)]


def test_weight_gradients_equal_autograd_and_fit():
    model, module = wrapped_model()
    grads = gradkit.weight_gradients(model, X, Y)
    norm = gradkit.gradient_norm(model, X, Y)
    expected = autograd(model, X, Y, "weights")
    assert len(grads) == 4  # the module's weight and bias, then the Dense layer's
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)
    assert np.abs(grads[0]).max() > 1e-3  # the module's own gradient is not the zero it was
    gradkit.track_gradient_norm(model)
    before = [np.array(w) for w in model.get_weights()]
    logs = model.train_on_batch(X, Y, return_dict=True)
    for g, b, a in zip(grads, before, model.get_weights()):
        np.testing.assert_allclose(g, b - a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logs["grad_norm"], norm, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(module[0].weight.detach()), model.get_weights()[0])  # fit moved it


def test_input_gradients_follow_the_module_weights():
    model, module = wrapped_model()
    for _ in range(2):  # the second call replays the traced function
        np.testing.assert_allclose(
            gradkit.input_gradient(model, X, Y), autograd(model, X, Y, "x", "sum")[0], rtol=1e-5, atol=1e-7
        )
    model.set_weights([w * 1.5 for w in model.get_weights()])  # new values, also in the module
    np.testing.assert_allclose(
        gradkit.input_gradient(model, X, Y), autograd(model, X, Y, "x", "sum")[0], rtol=1e-5, atol=1e-7
    )
    eps = 0.05
    expected = np.clip(X + eps * np.sign(autograd(model, X, Y, "x", "sum")[0]), 0, 1)
    np.testing.assert_allclose(gradkit.fgsm(model, X, Y, eps=eps, clip_values=(0, 1)), expected, atol=1e-6)


def test_wrapped_buffers_unchanged_in_training_mode():
    model, module = wrapped_model(batchnorm=True)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    grads = gradkit.weight_gradients(model, X, Y)  # training=True: the module's batch statistics
    gradkit.input_gradient(model, X, Y, training=True)
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key].numpy())
    expected = autograd(model, X, Y, "weights")  # the stateful call in training mode (moves the buffers)
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_a_parameter_replaced_after_wrapping_is_a_clear_error():
    import torch

    model, module = wrapped_model()
    module[0].weight = torch.nn.Parameter(module[0].weight.detach().clone())
    with pytest.raises(
        ValueError, match=r"layer 'wrapped'.*'0\.weight'.*not one of the model's Keras variables"
    ):
        gradkit.weight_gradients(model, X, Y)


def _one_step_noise_scale(grads, g1, g2, b1, b):
    """The ratio tr(Sigma) / |G|^2 of the estimates of one batch from its halves' gradients (McCandlish
    et al. 2018, Appendix A.1; the mean over the pairs (b1, b) and (b - b1, b))."""

    def sq(arrays):
        return sum(float(np.sum(np.square(a, dtype=np.float64))) for a in arrays)

    full, grad_sq, trace = sq(grads), 0.0, 0.0
    for b_small, small in ((b1, sq(g1)), (b - b1, sq(g2))):
        grad_sq += 0.5 * (b * full - b_small * small) / (b - b_small)
        trace += 0.5 * (small - full) / (1 / b_small - 1 / b)
    return trace / grad_sq


@pytest.mark.parametrize("split", [True, False])  # the halves from the step's own backward pass, or one more
def test_noise_scale_of_a_wrapped_module_is_the_estimate_from_its_halves(split, monkeypatch):
    from gradkit.backend.torch import noise_scale

    if not split:
        monkeypatch.setattr(noise_scale, "splittable", lambda *args: False)
    model, _ = wrapped_model()
    x, y = np.concatenate([X, X[::-1] * 0.5]), np.concatenate([Y, Y[::-1]])
    grads = gradkit.weight_gradients(model, x, y)
    g1, g2 = gradkit.weight_gradients(model, x[:6], y[:6]), gradkit.weight_gradients(model, x[6:], y[6:])
    gradkit.track_gradient_norm(model, per_layer=True, include="all")
    logs = model.train_on_batch(x, y, return_dict=True)  # one step: the bias-corrected average is it
    expected = _one_step_noise_scale(grads, g1, g2, 6, 12)
    assert np.isfinite(expected) and logs["noise_scale"] == pytest.approx(expected, rel=1e-3)
    wrapped = [k for k in logs if k.startswith("noise_scale/")]
    assert wrapped and all(np.isfinite(logs[k]) for k in wrapped)


def test_gradient_norm_callback_all_logs_finite_values_on_a_wrapped_module():
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    model = gradkit.from_torch(module, (4,))  # the whole model is the module (every layer's G_1 was 0)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="sgd")
    x = np.random.RandomState(1).rand(64, 4).astype("float32")
    y = np.arange(64) % 3
    callback = gradkit.GradientNormCallback(include="all")
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[callback])
    assert np.all(np.isfinite(history.history["noise_scale"]))
    assert all(np.all(np.isfinite(v)) for v in history.history.values()), history.history


def test_noise_scale_leaves_a_wrapped_modules_buffers_as_the_plain_step_does():
    import torch

    plain, tracked = wrapped_model(batchnorm=True), wrapped_model(batchnorm=True)
    tracked[0].set_weights(plain[0].get_weights())  # the head's too
    gradkit.track_gradient_norm(tracked[0], include=("norm", "noise_scale"))  # one more pass over a half
    for model, _ in (plain, tracked):
        model.train_on_batch(X, Y)
    for key, value in plain[1].state_dict().items():
        torch.testing.assert_close(tracked[1].state_dict()[key], value, rtol=1e-5, atol=1e-6, msg=key)
