"""`_entry_run`: a block that runs out of device memory is retried with `batch_size` halved, its rows and
seed unchanged, so the per-sample result (samples.csv) equals a run without the error."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.gradients import AttackGradient
from helpers.cli import run_evaluate, samples

from conftest import BACKEND


def backend_oom():
    """The exception the backend raises when the device's memory runs out."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[16,8]")
    if BACKEND == "torch":
        import torch

        return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    import jax

    return jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.0GiB.")


def failing_first(monkeypatch, times):
    """Makes the first `times` compiled attack steps raise the backend's out-of-memory error; returns
    the rows of every call made (the failed ones included)."""
    original, calls = AttackGradient.step_function, []

    def step_function(self, name, update, **static):
        step = original(self, name, update, **static)

        def call(trainables, non_trainables, state, fixed):
            calls.append(int(keras.tree.flatten(state["x"])[0].shape[0]))
            if len(calls) <= times:
                raise backend_oom()
            return step(trainables, non_trainables, state, fixed)

        return call

    monkeypatch.setattr(AttackGradient, "step_function", step_function)
    return calls


def model_and_data(n=40):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, kernel_initializer="glorot_uniform")])
    model.set_weights(
        [np.random.default_rng(0).normal(size=(8, 3)).astype("float32"), np.zeros(3, "float32")]
    )
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(n, 8)).astype("float32")
    return model, x, np.argmax(model.predict(x, verbose=0), 1)


def run(model, x, y):
    return gradkit.evaluate(
        model,
        x,
        y,
        eps=0.08,
        attacks=["fgsm", "apgd-ce"],
        steps=4,
        batch_size=16,
        clip_values=(0, 1),
        verbose=0,
    )


def test_an_oom_in_the_first_block_is_retried_at_half_the_batch_with_the_same_result(monkeypatch):
    model, x, y = model_and_data()
    plain = run(model, x, y)
    calls = failing_first(monkeypatch, times=2)  # 16 rows fail, then 8 rows fail, 4 rows run
    retried = run(model, x, y)
    assert calls[:3] == [16, 8, 4]
    assert 0 < plain.robust_accuracy < plain.clean_accuracy  # the attacks broke some points, not all
    np.testing.assert_array_equal(retried.robust, plain.robust)
    assert retried.broken_by == plain.broken_by
    np.testing.assert_allclose(retried.x_adv, plain.x_adv, atol=1e-6)
    for name in ("fgsm", "apgd-ce"):
        assert retried.per_attack[name]["n_broken"] == plain.per_attack[name]["n_broken"]


def test_an_oom_at_every_batch_size_names_what_was_tried(monkeypatch):
    model, x, y = model_and_data(n=16)
    failing_first(monkeypatch, times=10**6)
    with pytest.raises(gradkit.OutOfMemoryError, match=r"fgsm.*batch_size=16, 8, 4, 2, 1") as info:
        run(model, x, y)
    assert isinstance(info.value.__cause__, type(backend_oom()))


def test_a_forced_oom_gives_the_same_samples_csv(monkeypatch, tmp_path, capsys):
    model, x, y = model_and_data()
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "d.npz", x=x, y=y)
    args = [str(tmp_path / "m.keras"), str(tmp_path / "d.npz"), "--eps", "0.08", "--attacks", "fgsm,pgd"]
    args += ["--steps", "3", "--batch-size", "16", "--no-progress"]
    assert run_evaluate(capsys, *args, "--out", str(tmp_path / "plain"))[0] == 0
    failing_first(monkeypatch, times=1)
    assert run_evaluate(capsys, *args, "--out", str(tmp_path / "oom"))[0] == 0
    assert samples(tmp_path / "oom") == samples(tmp_path / "plain")
    assert any(r["broken_by"] not in ("", "clean") for r in samples(tmp_path / "plain"))
