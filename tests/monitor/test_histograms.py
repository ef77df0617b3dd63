"""Gradient histograms in TensorBoard (`GradientNormCallback(histogram_freq=...)`,
`gradkit.monitor._histograms`): the event file read back with TensorBoard's own reader, against the step's
gradient computed independently."""

import os

import keras
import numpy as np
import pytest

import gradkit
from gradkit.monitor import GradientNormCallback
from helpers.training import LOSS, X, Y, mlp


def read_histograms(log_dir):
    """{(tag, step): (k, 3) array of [left, right, count]} from the event files of `<log_dir>/train`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(os.path.join(log_dir, "train"), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {
        (tag, event.step): tensor_util.make_ndarray(event.tensor_proto)
        for tag in accumulator.Tags()["tensors"]
        if tag.endswith("/gradient_histogram")
        for event in accumulator.Tensors(tag)
    }


def test_histograms_are_the_steps_own_gradients_per_layer(tmp_path):
    model = mlp(keras.optimizers.SGD(0.0))  # fixed weights: epoch e's first step is batch 0's gradient
    grads = gradkit.weight_gradients(model, X[:4], Y[:4])
    callback = GradientNormCallback(histogram_freq=2, log_dir=tmp_path, include=("norm", "health"))
    board = keras.callbacks.TensorBoard(log_dir=tmp_path)
    history = model.fit(X, Y, batch_size=4, epochs=3, shuffle=False, verbose=0, callbacks=[callback, board])
    assert "grad_max" in history.history
    found = read_histograms(str(tmp_path))
    assert sorted(found) == sorted(
        (f"{layer}/gradient_histogram", e) for layer in ("hidden", "logits") for e in (0, 2)
    )
    for layer, idx in (("hidden", [0, 1]), ("logits", [2, 3])):
        flat = np.concatenate([grads[i].ravel() for i in idx])
        for epoch in (0, 2):
            bins = found[(f"{layer}/gradient_histogram", epoch)]
            assert bins.shape == (30, 3)
            assert bins[:, 2].sum() == flat.size  # every entry counted once
            assert bins[0, 0] == pytest.approx(flat.min(), rel=1e-5)
            assert bins[-1, 1] == pytest.approx(flat.max(), rel=1e-5)
            expected, _ = np.histogram(flat, bins=30, range=(bins[0, 0], bins[-1, 1]))
            assert np.abs(bins[:, 2] - expected).sum() <= 2  # bin edges agree up to float rounding
    # Keras' own TensorBoard callback wrote its scalars into the same directory.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tmp_path / "train"))
    accumulator.Reload()
    assert "epoch_grad_max" in accumulator.Tags()["tensors"]


def test_histograms_need_tensorboard_and_a_good_frequency(monkeypatch):
    from gradkit import backend

    with pytest.raises(ValueError, match="`histogram_freq` must be an integer >= 0"):
        GradientNormCallback(histogram_freq=-1)
    with pytest.raises(TypeError, match="`histogram_freq` must be an integer"):
        GradientNormCallback(histogram_freq=1.5)
    with pytest.raises(TypeError, match="`log_dir` must be a str or os.PathLike"):
        GradientNormCallback(histogram_freq=1, log_dir=3)
    monkeypatch.setattr(backend, "summaries_available", lambda: False)
    with pytest.raises(ValueError, match="`histogram_freq` must be 0 without TensorBoard"):
        GradientNormCallback(histogram_freq=1)
    assert GradientNormCallback(histogram_freq=0).histogram_freq == 0


def test_histograms_on_a_model_without_a_trainable_layer_are_refused_before_fit(tmp_path):
    frozen = mlp()
    frozen.trainable = False
    frozen.compile(optimizer="sgd", loss=LOSS)
    with pytest.raises(ValueError, match="`histogram_freq` must be 0 for a model without a trainable"):
        frozen.fit(X, Y, verbose=0, callbacks=[GradientNormCallback(histogram_freq=1, log_dir=tmp_path)])
