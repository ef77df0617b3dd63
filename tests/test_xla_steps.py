"""Attack steps of models whose Keras `jit_compile` is True: on TensorFlow a gradient attack's whole
compiled step is one XLA cluster (the model's forward and backward with the update), as Keras' own
`fit` and `predict` compile such a model; Square's search keeps its form (a whole XLA cluster measured
no faster there, benchmarks/README.md). JAX is XLA anyway and PyTorch eager, so there the setting
changes nothing. The results agree with those of the same weights compiled the default way (bit for
bit on JAX and PyTorch), and the setting is read per call, so switching it builds the other step.
"""

import inspect

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.gradients import _model_io

BACKEND = keras.backend.backend()


def _models():
    """The same small CNN twice: compiled without XLA and with it (Keras' "auto" is False on a CPU-only
    TensorFlow and PyTorch, True on JAX)."""
    keras.utils.set_random_seed(3)
    plain = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(5)])  # fmt: skip
    plain.compile(loss="sparse_categorical_crossentropy")
    plain.jit_compile = False
    xla = keras.models.clone_model(plain)
    xla.set_weights(plain.get_weights())
    xla.compile(loss="sparse_categorical_crossentropy")
    xla.jit_compile = True  # after compile: on PyTorch, compile's own jit_compile would torch.compile fit
    return plain, xla


def _data():
    rng = np.random.RandomState(0)
    return rng.uniform(size=(48, 8, 8, 3)).astype(np.float32), rng.randint(0, 5, 48)


def test_jit_compiled_reads_every_member():
    plain, xla = _models()
    keras.utils.set_random_seed(0)
    fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert _model_io.jit_compiled([fresh]) is (BACKEND == "jax")  # "auto" on a CPU-only machine
    assert _model_io.jit_compiled([xla]) is True
    assert _model_io.jit_compiled([xla, plain]) is False  # every member must say so
    assert _model_io.jit_compiled([plain]) is False


def test_steps_are_built_with_the_members_setting(monkeypatch):
    seen = []
    for name in ("compile_step", "compile_search"):
        original = getattr(backend, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            seen.append((_name, kwargs.get("jit_compile")))
            return _original(*args, **kwargs)

        monkeypatch.setattr(backend, name, spy)
    plain, xla = _models()
    x, y = _data()
    for model in (plain, xla):
        gradkit.pgd(model, x, y, eps=0.05, eps_step=0.02, steps=2, clip_values=(0, 1))
        gradkit.square(model, x, y, eps=0.05, n_queries=5, seed=0, clip_values=(0, 1))
    assert seen == [("compile_step", False), ("compile_search", None), ("compile_step", True),
                    ("compile_search", None)]  # fmt: skip
    seen.clear()
    xla.jit_compile = False  # read at each call: the default steps, already built for `plain`'s twin
    gradkit.pgd(xla, x, y, eps=0.05, eps_step=0.02, steps=2, clip_values=(0, 1))
    assert seen == [("compile_step", False)]


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the XLA cluster is TensorFlow's")
def test_tensorflow_step_is_one_xla_function():
    import tensorflow as tf

    for jit in (False, True):
        call = backend.compile_step(lambda *a: (tf.reduce_sum(a[2]), ()), lambda s, *_: s, jit_compile=jit)
        fast = inspect.getclosurevars(call).nonlocals["fast"]
        function = inspect.getclosurevars(fast).nonlocals["function"]
        assert isinstance(function, tf.types.experimental.PolymorphicFunction)
        assert bool(function._jit_compile) is jit


def _attacks(model, x, y):
    common = dict(eps=0.05, clip_values=(0, 1))
    return {
        "pgd": gradkit.pgd(model, x, y, eps_step=0.02, steps=5, random_start=True, seed=1, **common),
        "apgd": gradkit.apgd(model, x, y, steps=8, seed=0, **common),
        "apgd_l2": gradkit.apgd(model, x, y, steps=8, seed=0, norm=2, eps=0.5, clip_values=(0, 1)),
        "square": gradkit.square(model, x, y, n_queries=30, seed=0, **common),
    }


def test_results_agree_with_the_default_compilation():
    plain, xla = _models()
    x, y = _data()
    a, b = _attacks(plain, x, y), _attacks(xla, x, y)
    for name in a:
        if BACKEND != "tensorflow":  # the setting changes nothing there
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
            continue
        # XLA rounds the model's sums in another order: a gradient coordinate near zero may take the
        # other sign; the iterates stay close and the decisions agree.
        assert np.mean(np.abs(a[name] - b[name]) > 1e-5) < 0.02, name
        decided = [np.argmax(plain.predict(r[name], verbose=0), 1) for r in (a, b)]
        same = np.mean(decided[0] == decided[1])
        assert same >= 0.95, (name, same)
        assert np.all(np.abs(b[name] - x) <= (0.5 if name == "apgd_l2" else 0.05) + 1e-6)
