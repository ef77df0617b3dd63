"""Out of device memory inside an attack or evaluation step: the backend's own error (injected here) is
re-raised as `gradkit.OutOfMemoryError`, naming `batch_size`, its cause kept; other errors pass
unchanged."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.gradients import AttackGradient

from conftest import BACKEND


def backend_oom():
    """The exception the backend raises when the device's memory runs out."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[64,8]")
    if BACKEND == "torch":
        import torch

        return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    import jax

    return jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.0GiB.")


def model_and_data():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
    rng = np.random.RandomState(0)
    return model, rng.uniform(size=(40, 8)).astype("float32"), rng.randint(0, 3, 40)


def raising(error):
    def compile(self, name, *parts, **static):  # step_function: update; search_function: three
        def step(*args):
            raise error

        return step

    return compile


@pytest.mark.parametrize("attack", ["pgd", "apgd", "square", "evaluate"])
def test_backend_oom_in_a_step_names_batch_size(attack, monkeypatch):
    model, x, y = model_and_data()
    error = backend_oom()
    monkeypatch.setattr(AttackGradient, "step_function", raising(error))
    monkeypatch.setattr(AttackGradient, "search_function", raising(error))
    run = {
        "pgd": lambda: gradkit.pgd(model, x, y, eps=0.1, eps_step=0.05, steps=3, batch_size=16),
        "apgd": lambda: gradkit.apgd(model, x, y, eps=0.1, steps=3, batch_size=16),
        "square": lambda: gradkit.square(model, x, y, eps=0.1, n_queries=5, batch_size=16),
        "evaluate": lambda: gradkit.evaluate(
            model, x, y, eps=0.1, steps=3, n_queries=5, batch_size=16, verbose=0
        ),  # fmt: skip
    }[attack]
    with pytest.raises(
        gradkit.OutOfMemoryError, match=r"batch of 16 rows.*smaller `batch_size`.*batch_size=8"
    ) as info:
        run()
    assert info.value.__cause__ is error and isinstance(info.value, MemoryError)
    assert backend.is_out_of_memory(error)


def test_backend_oom_in_a_gradient_call_and_other_errors_unchanged(monkeypatch):
    model, x, y = model_and_data()
    objective = AttackGradient(model, batch_size=32)
    error = backend_oom()

    def fail(*args):
        raise error

    monkeypatch.setattr(objective, "_fn", fail)
    with pytest.raises(gradkit.OutOfMemoryError, match="gradient call on a batch of 32 rows"):
        objective(x, y)
    other = RuntimeError("shapes do not match")
    monkeypatch.setattr(AttackGradient, "step_function", raising(other))
    with pytest.raises(RuntimeError, match="shapes do not match") as info:
        gradkit.pgd(model, x, y, eps=0.1, eps_step=0.05, steps=3)
    assert info.value is other and not backend.is_out_of_memory(other)
    assert backend.is_out_of_memory(RuntimeError("CUDA out of memory.")) == (BACKEND == "torch")
