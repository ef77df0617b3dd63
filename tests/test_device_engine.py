"""The attack engine keeps an attack's state on the device: FGSM/BIM/PGD, APGD and Square run as one compiled
call per step (gradient or forward, move, projection, clip, records), nothing goes to numpy between steps
(JAX: under `jax.transfer_guard`; TensorFlow and PyTorch: conversions counted), and each
step function is traced once per input shape whatever eps, step size or clip range."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.attacks import _engine, geometry
from gradkit.attacks._frame import Frame, gradient_for, owner, step_for

from conftest import BACKEND

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def cnn(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
        keras.layers.Dense(3),
    ])  # fmt: skip
    model.compile(loss=LOGITS_CE)
    return model


def data(n=20):
    rng = np.random.RandomState(0)
    return rng.uniform(size=(n, 6, 6, 2)).astype("float32"), rng.randint(0, 3, n)


def numpy_pgd(model, x, y, eps, eps_step, steps, norm):
    """Classic PGD (keep="last", no random start) with gradkit's numpy geometry and InputGradient."""
    x_adv = x.copy()
    for _ in range(steps):
        g = gradkit.input_gradient(model, x_adv, y, loss=LOGITS_CE)
        moved = x_adv + np.float32(eps_step) * geometry.direction(g, norm)
        x_adv = geometry.project_and_clip(moved, x, eps, norm, (0.0, 1.0))
    return x_adv


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_device_steps_equal_the_numpy_loop(norm):
    model, (x, y) = cnn(), data()
    eps = 0.1 if norm == np.inf else 0.5
    adv = gradkit.bim(
        model, x, y, eps=eps, eps_step=eps / 4, steps=6, norm=norm, clip_values=(0, 1), keep="last"
    )
    np.testing.assert_allclose(adv, numpy_pgd(model, x, y, eps, eps / 4, 6, norm), atol=2e-6)


def test_one_trace_per_input_shape_for_any_eps_step_and_range():
    model, (x, y) = cnn(), data()
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

    model, (x, y) = cnn(), data()
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
    model, (x, y) = cnn(), data()
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


@pytest.mark.parametrize(
    "loss, norm, targeted", [("ce", np.inf, False), ("dlr", 2, False), ("ce", np.inf, True)]
)
def test_device_apgd_equals_the_numpy_core(loss, norm, targeted):
    """The engine's APGD against `apgd_core` (the numpy reference) on the same objective: same examples,
    same successes, same count of gradient rows (the early stop of succeeded rows kept)."""
    from gradkit.attacks.apgd import run as apgd_run
    from oracles.apgd import apgd_core

    model, (x, y) = cnn(1), data(24)
    y = gradkit.attacks.predict_labels(gradient_for(model), x)
    eps = 0.05 if norm == np.inf else 0.15
    session = Frame(model, x, y, clip_values=(0, 1), loss=loss, targeted=targeted, single_input="APGD")
    targets = (y + 1) % 3 if targeted else None

    def step(xs, labels, targets):  # as APGD-T: success is any misclassification
        values, predictions, grad = session.step(xs, labels, targets)
        return (
            values,
            predictions if targets is None else np.where(predictions != labels, targets, labels),
            grad,
        )

    ref, ref_hit, _, _ = apgd_core(step, session.x0, session.labels, eps=eps, norm=norm, steps=12,
                                   clip_values=(0, 1), rng=3, targets=targets)  # fmt: skip
    expected, session.n_gradients = session.n_gradients, 0
    adv, hit, _ = apgd_run(
        session, session.x0, session.labels, targets, eps=eps, norm=float(norm), steps=12, rng=3, rho=0.75
    )
    assert 0 < ref_hit.sum() < len(x)  # some rows stop early, some run to the end
    np.testing.assert_array_equal(hit, ref_hit)
    # L2: the per-sample norms are sums in another order than numpy's (float32 rounding, through momentum)
    np.testing.assert_allclose(adv, ref, atol=1e-5 if norm == np.inf else 1e-4)
    assert session.n_gradients == expected
