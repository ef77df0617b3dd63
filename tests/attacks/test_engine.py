"""The attack engine (`gradkit.attacks._engine`): an attack's state stays on the device, one compiled call
per step (JAX: no host transfer under `jax.transfer_guard`; TensorFlow and PyTorch: conversions counted),
each step traced once per input shape whatever eps, step size or range; steps of `jit_compile` models
whole under XLA on TensorFlow; the backend's out-of-memory error re-raised naming `batch_size`."""

import inspect

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.attacks import _engine
from gradkit.attacks._frame import gradient_for, owner, step_for
from gradkit.gradients import AttackGradient, _model_io
from helpers.models import random_images, small_cnn

from conftest import BACKEND


def test_one_trace_per_input_shape_for_any_eps_step_and_range():
    model, (x, y) = small_cnn(), random_images()
    for eps, clip in [(0.05, (0, 1)), (0.1, (0, 1)), (0.3, (-1, 2))]:
        gradkit.pgd(model, x, y, eps=eps, eps_step=eps / 3, steps=3, clip_values=clip, seed=0)
    grad = gradient_for(model)
    step = step_for(owner(model), grad, loss=None, objective="loss_sum", targeted=False, output=None,
                    batch_size=None)  # fmt: skip
    assert list(step._fn.steps.values())[0].trace_count == 1 and len(step._fn.steps) == 1
    assert step.trace_count == 1  # the step is the attack's only compiled call


@pytest.mark.skipif(BACKEND != "jax", reason="jax.transfer_guard is JAX's")
def test_jax_steps_between_checkpoints_make_no_host_transfer(monkeypatch):
    import jax

    model, (x, y) = small_cnn(), random_images()
    guarded, advance = [], _engine.advance

    def checked(step, variables, state, fixed, n_steps):
        with jax.transfer_guard("disallow"):
            state = advance(step, variables, state, fixed, n_steps)
        guarded.append(n_steps)
        return state

    monkeypatch.setattr(_engine, "advance", checked)
    for norm in (np.inf, 2):
        adv = gradkit.pgd(model, x, y, eps=0.2, eps_step=0.05, steps=8, norm=norm, clip_values=(0, 1), seed=0)
        assert np.all(np.isfinite(adv))
    assert guarded == [9, 9]  # 8 steps and the evaluation of the last iterate, compilation included
    guarded.clear()
    gradkit.apgd(model, x, y, eps=0.02, steps=20, clip_values=(0, 1), seed=0)  # checkpoints 5, 9, 12, ...
    assert sum(guarded) >= 10 and len(guarded) >= 4
    for norm in (np.inf, 2):  # Square: proposals drawn in the step, a flag read every CHECK_EVERY steps
        guarded.clear()
        gradkit.square(model, x, y, eps=1e-4, norm=norm, n_queries=250, clip_values=(0, 1), seed=0)
        assert guarded == [100, 100, 50]


@pytest.mark.skipif(BACKEND == "jax", reason="JAX: checked with jax.transfer_guard")
def test_numpy_conversions_do_not_grow_with_steps(monkeypatch):
    model, (x, y) = small_cnn(), random_images()
    calls = []
    to_numpy, convert = backend.to_numpy, keras.ops.convert_to_numpy
    monkeypatch.setattr(backend, "to_numpy", lambda t: calls.append(1) or to_numpy(t))
    monkeypatch.setattr(keras.ops, "convert_to_numpy", lambda t: calls.append(1) or convert(t))
    counts = []
    for steps in (2, 2, 12):  # the first attack on a model also builds what later ones reuse
        calls.clear()
        gradkit.pgd(model, x, y, eps=0.2, eps_step=0.05, steps=steps, clip_values=(0, 1), seed=0)
        counts.append(len(calls))
    assert counts[1] == counts[2] == 1, counts  # the result, read back once
    counts.clear()
    for steps in (10, 40):  # the same 8 checkpoints (w_j = ceil(p_j * steps), distinct)
        calls.clear()
        gradkit.apgd(model, x, y, eps=0.001, steps=steps, clip_values=(0, 1), seed=0)
        counts.append(len(calls))
    assert counts[0] == counts[1] <= 8 + 4, counts  # a flag per checkpoint, the result, the count
    for norm in (np.inf, 2):
        counts.clear()
        for n_queries in (40, 40, 340):  # 0 and 3 checks (every 100 steps): 300 more steps
            calls.clear()
            gradkit.square(model, x, y, eps=1e-4, norm=norm, n_queries=n_queries, clip_values=(0, 1), seed=0)
            counts.append(len(calls))
        assert counts[2] - counts[1] == 3 and counts[1] <= 4, counts  # a flag per check; x, flags, counts


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
    expected = r"batch of 16 rows.*smaller `batch_size`.*batch_size=8"
    if attack == "evaluate":  # evaluate retries the block at half the batch, down to one row
        expected = r"block of \d+ rows at every batch_size tried \(batch_size=16, 8, 4, 2, 1\)"
    with pytest.raises(gradkit.OutOfMemoryError, match=expected) as info:
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


def _fast_and_plain(monkeypatch, name, call):
    """`call()` with the backend's fast path `name`, then with it removed (the `keras.ops` code)."""
    fast = call()
    with monkeypatch.context() as m:
        m.setattr(backend, name, None)
        plain = call()
    return backend.to_numpy(fast), backend.to_numpy(plain)


@pytest.mark.skipif(backend.linf_step is None, reason="this backend has no fast paths")
@pytest.mark.parametrize("clip", [True, False])
def test_fast_paths_give_the_keras_ops_values(monkeypatch, clip):
    """PyTorch's in-place Linf steps (`backend.fast_paths`) against the `keras.ops` code they stand in for:
    the PGD step, APGD's momentum step and the Square Attack's Linf window, bit for bit."""
    from gradkit.attacks.apgd import _propose
    from gradkit.attacks.pgd import step
    from gradkit.attacks.square import linf_proposal

    rng = np.random.default_rng(0)
    shape = (16, 6, 5, 3)
    x0 = rng.uniform(0.2, 0.8, shape).astype(np.float32)
    x = np.clip(x0 + rng.uniform(-0.1, 0.1, shape), 0, 1).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    t = backend.to_tensor
    eps, size = _engine.scalar(0.1), _engine.scalar(0.03)
    bounds = (_engine.scalar(0.0), _engine.scalar(1.0)) if clip else None

    def pgd_step():
        return step(t(x.copy()), t(x0), t(g.copy()), size, eps, np.inf, bounds)

    fast, plain = _fast_and_plain(monkeypatch, "linf_step", pgd_step)
    np.testing.assert_array_equal(fast, plain)

    def apgd_step():
        state = {
            "x": t(x.copy()),
            "x_prev": t(x0.copy()),
            "grad": t(g.copy()),
            "k": _engine.scalar_int(3),
            "eta": t(rng_eta.copy()),
        }
        fixed = {"x0": t(x0), "eps": eps, "momentum": _engine.scalar(0.75)}
        return _propose(state, fixed, np.inf, bounds, t(active))["x"]

    rng_eta = rng.uniform(0.01, 0.2, shape[0]).astype(np.float32)
    active = rng.uniform(size=shape[0]) < 0.7
    fast, plain = _fast_and_plain(monkeypatch, "apgd_linf_step", apgd_step)
    np.testing.assert_array_equal(fast, plain)

    ends = [np.clip(x0 + s * np.float32(0.1), 0, 1).astype(np.float32) for s in (1, -1)]
    u = rng.uniform(size=(shape[0], 2 + 8 * shape[-1])).astype(np.float32)

    def square_window():
        sides = t(np.asarray([2, 3], np.int32))
        return linf_proposal(t(x.copy()), [t(e) for e in ends], sides, t(u))

    fast, plain = _fast_and_plain(monkeypatch, "linf_window", square_window)
    np.testing.assert_array_equal(fast, plain)


def _alone(model, x):
    """The decision on each row predicted alone (a batch of one), as a user re-checks an example."""
    return np.array(
        [keras.ops.convert_to_numpy(model(x[i : i + 1])).argmax(axis=1)[0] for i in range(len(x))]
    )


@pytest.mark.parametrize("attack, norm", [("fmn", np.inf), ("fmn", 2), ("fmn", 1), ("ddn", 2), ("fab", 1)])
def test_minimum_norm_examples_stay_adversarial_when_predicted_alone(attack, norm):
    """On an exactly linear model the minimal perturbation ends ON the boundary (a logit gap of 0 or
    6e-8, decided by the rounding of the batch); every example returned as adversarial is landed just
    past it, so a batch of one and `model.predict` in other batch sizes see it misclassified, and its
    norm stays within 1e-3 (relative) of the closed-form minimum |z_1 - z_0| / ||w_1 - w_0||_dual for
    FMN; DDN's and FAB's own accuracy (their step rules) are 2e-2 and 6e-3."""
    from oracles.linear import X, exact, labels, linear, lp

    model = linear()
    y = labels(model)
    options = {} if attack == "ddn" else {"norm": norm}
    adv = getattr(gradkit, attack)(model, X, y, steps=100, clip_values=(0, 1), **options)
    assert (_alone(model, adv) != y).all()
    for batch_size in (1, 5, 12):
        assert (model.predict(adv, batch_size=batch_size, verbose=0).argmax(axis=1) != y).all()
    z = keras.ops.convert_to_numpy(model(adv)).astype(np.float64)
    assert np.abs(z[:, 1] - z[:, 0]).min() > 1e-5  # past the boundary by more than any rounding
    ratio = lp(adv - X, norm) / exact(X, y, norm)
    assert ratio.min() > 1 - 1e-5 and ratio.max() < 1 + {"fmn": 1.1e-3, "ddn": 2e-2, "fab": 6e-3}[attack]
    result = gradkit.min_norm(model, X, y, norm=norm, attacks=(attack,), steps=100, clip_values=(0, 1))
    assert np.isfinite(result.norms).all() and (_alone(model, result.x_adv) != y).all()


def test_past_boundary_lands_the_boundary_point_and_drops_what_no_overshoot_settles():
    """`_engine.past_boundary` on the exact L2 boundary points x0 - a w / ||w||^2 of a linear model
    (gap about 1e-7): each moves out by the smallest overshoot that gives a gap beyond SETTLED_GAP (a
    norm at most 1e-3 larger); a candidate on the clean side of the boundary is dropped (the clean
    input returned, not found); a point misclassified clean keeps its own flag."""
    from gradkit.attacks._frame import Frame
    from oracles.linear import C, W, X, labels, linear

    model = linear()
    y = labels(model)
    w = (W[:, 1] - W[:, 0]).astype(np.float64)
    a = X.astype(np.float64) @ w + C
    on = (X - (a / (w @ w))[:, None] * w).astype(np.float32)
    frame = Frame(model, X, y, loss="margin", single_input="test").as_float32()
    candidates = np.where(np.arange(len(X))[:, None] == 0, X + 0.5 * (on - X), on)  # row 0: halfway
    x_adv, found = _engine.past_boundary(frame, candidates, np.zeros(len(X), bool))
    assert not found[0] and np.array_equal(x_adv[0], X[0])
    assert found[1:].all() and (_alone(model, x_adv[1:]) != y[1:]).all()
    grow = np.linalg.norm(x_adv[1:] - X[1:], axis=1) / np.linalg.norm(on[1:] - X[1:], axis=1)
    assert grow.min() >= 1 and grow.max() <= 1 + 1e-3
    kept = _engine.past_boundary(frame, X.copy(), np.arange(len(X)) < 3)  # unmoved: the flags stand
    np.testing.assert_array_equal(kept[1], np.arange(len(X)) < 3)
