"""Auto-PGD (`gradkit.attacks.apgd`) on every backend: the device run against the numpy reference
(`oracles.apgd`), threat-model properties and strength against PGD on a trained model, APGD-T's stacked
targets, ensemble objectives, APGD-L1's sparse step, schedules and ball, the same numbers on every
backend, bad input."""

import sys

import keras
import numpy as np
import pytest
from keras import ops

import gradkit
from gradkit import backend
from gradkit.attacks import decide
from gradkit.attacks._frame import Frame, gradient_for
from gradkit.attacks.apgd import l1_marks, sparse_direction, stages
from gradkit.gradients._cache import cached_values
from helpers.models import l1_sizes, random_images, small_cnn

from conftest import BACKEND, set_weights_from


@pytest.mark.parametrize(
    "loss, norm, targeted", [("ce", np.inf, False), ("dlr", 2, False), ("ce", np.inf, True)]
)
def test_device_apgd_equals_the_numpy_core(loss, norm, targeted):
    """The engine's APGD against `apgd_core` (the numpy reference) on the same objective: same examples,
    same successes, same count of gradient rows (the early stop of succeeded rows kept)."""
    from gradkit.attacks.apgd import run as apgd_run
    from oracles.apgd import apgd_core

    model, (x, y) = small_cnn(1), random_images(24)
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


def accuracy(model, x, y):
    return float(np.mean(decide(model, x) == y))


@pytest.mark.parametrize("norm, eps", [(np.inf, 0.1), (2, 1.0)])
def test_apgd_and_square_stay_in_ball_and_box_and_repeat(digits_mlp, norm, eps):
    model, x, y = digits_mlp
    for attack in (
        lambda s: gradkit.apgd(model, x, y, eps=eps, norm=norm, steps=20, clip_values=(0, 1), seed=s),
        lambda s: gradkit.square(model, x, y, eps=eps, norm=norm, n_queries=50, clip_values=(0, 1), seed=s),
    ):
        adv = attack(0)
        delta = (adv - x).reshape(len(x), -1)
        size = np.abs(delta).max(axis=1) if norm == np.inf else np.linalg.norm(delta, axis=1)
        assert size.max() <= eps + 1e-5 and adv.min() >= 0 and adv.max() <= 1
        np.testing.assert_array_equal(attack(0), adv)
        assert accuracy(model, adv, y) < accuracy(model, x, y)
    np.testing.assert_array_equal(gradkit.apgd(model, x, y, eps=0.0), x)


def test_apgd_is_at_least_as_strong_as_pgd_and_traces_once(digits_mlp):
    model, x, y = digits_mlp
    pgd = gradkit.pgd(model, x, y, eps=0.1, eps_step=0.025, steps=10, clip_values=(0, 1), seed=0)
    ce = gradkit.apgd(model, x, y, eps=0.1, steps=50, clip_values=(0, 1), seed=0)
    dlr = gradkit.apgd(model, x, y, eps=0.1, steps=50, loss="dlr", clip_values=(0, 1), seed=0)
    t = gradkit.apgd(model, x, y, eps=0.1, steps=20, loss="dlr", targeted=True, n_target_classes=3,
                     clip_values=(0, 1), seed=0)  # fmt: skip
    clean, pgd_acc = accuracy(model, x, y), accuracy(model, pgd, y)
    assert min(accuracy(model, ce, y), accuracy(model, dlr, y)) <= pgd_acc  # DLR alone may trail CE
    assert accuracy(model, dlr, y) < clean - 0.3
    assert accuracy(model, t, y) < clean
    objectives = cached_values(model, "attack")
    # with and without gradient; where a new shape is cheap (PyTorch), rows are padded only to a
    # multiple of ROW_QUANTUM: one trace per such row count at most (APGD-T's 3 targets run together)
    # The attacks' compiled steps (the engine: one per attack and norm, see `AttackGradient.step_function`)
    # each trace once per row count in the same way.
    quantum = backend.ROW_QUANTUM
    shapes = 1 if quantum is None else -(-3 * len(x) // quantum)
    assert objectives and all(f._fn.trace_count + f._forward_fn.trace_count <= 2 * shapes for f in objectives)
    assert all(s.trace_count <= shapes for f in objectives for s in getattr(f._fn, "steps", {}).values())


def test_ensemble_objectives_all_attack_the_vote(digits_mlp):
    model, x, y = digits_mlp
    other = keras.models.clone_model(model)
    other.set_weights([w * 0.9 for w in model.get_weights()])
    ens = gradkit.WeightedEnsemble([model, other], [0.6, 0.4])
    clean = accuracy(ens, x, y)
    for objective in ("loss_sum", "logit_mean", "prob_mean", "vote_margin"):
        adv = gradkit.apgd(ens, x, y, eps=0.1, steps=20, clip_values=(0, 1), seed=0, objective=objective)
        assert accuracy(ens, adv, y) < clean - 0.1, objective


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(eps=-0.1), ValueError, "`eps` must be >= 0"),
        (dict(eps=0.1, loss="hinge"), ValueError, "`loss` must be one of"),
        (dict(eps=0.1, steps=0), ValueError, "`steps` must be an integer >= 1"),
        (dict(eps=0.1, n_restarts=1.5), TypeError, "`n_restarts` must be an integer"),
        (dict(eps=0.1, objective="max"), ValueError, "`objective` must be one of"),
    ],
)
def test_apgd_bad_input(digits_mlp, kwargs, error, match):
    model, x, y = digits_mlp
    with pytest.raises(error, match=match):
        gradkit.apgd(model, x[:4], y[:4], **kwargs)


def test_dlr_needs_enough_classes_and_square_needs_queries():
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(3)(inp))
    x, y = np.zeros((2, 3), "float32"), np.array([0, 1])
    gradkit.apgd(model, x, y, eps=0.1, loss="dlr", steps=2)  # 3 classes: untargeted DLR works
    with pytest.raises(ValueError, match="at least 4 classes targeted"):
        gradkit.apgd(model, x, y, eps=0.1, loss="dlr", targeted=True)
    with pytest.raises(ValueError, match="`n_queries` must be an integer >= 1"):
        gradkit.square(model, x, y, eps=0.1, n_queries=0)
    with pytest.raises(TypeError, match="single-input"):
        gradkit.square(model, [x], y, eps=0.1)
    with pytest.raises(ValueError, match="`y` \\(the target classes\\) is required"):
        gradkit.square(model, x, None, eps=0.1, targeted=True)  # predictions as targets: "fooled" at once


def test_apgd_t_runs_its_targets_together_and_keeps_the_first_that_succeeds(digits_mlp, monkeypatch):
    """APGD-T stacks the rows of all its targets into one run (rows independent, so it equals one run
    per target); a point keeps the example of the first target (in rank order) that fooled it, else
    its first target's best iterate. A stand-in core decides which (point, target) rows succeed."""
    _apgd_attack = sys.modules["gradkit.attacks.apgd"]  # the module (`gradkit.attacks.apgd`: the function)

    model, x, y = digits_mlp
    x, y, n, k = x[:12], y[:12], 12, 4
    calls = []

    def fake_core(frame, x0, labels, targets, **options):
        calls.append(len(x0))
        j, i = np.divmod(np.arange(len(x0)), n)  # target-major rows: target j of point i
        hit = (i % 4 == j) & (j > 0)  # point i is fooled by target i % 4, unless that is target 0
        hit |= (i % 4 == 3) & (j == 2)  # ... and points 3, 7, 11 by target 2 before target 3
        return x0 + np.float32(0.01) * (j + 1)[:, None], hit

    monkeypatch.setattr(_apgd_attack, "run", fake_core)
    with gradkit.attacks.recording() as record:
        adv = gradkit.apgd(
            model, x, y, eps=0.1, loss="dlr", targeted=True, n_target_classes=k, clip_values=(0, 1)
        )
    success = record.success
    assert calls == [n * k]  # one run for the 4 targets
    first = np.array([[0, 1, 2, 2][i % 4] for i in range(n)])
    np.testing.assert_array_equal(success, np.arange(n) % 4 != 0)
    np.testing.assert_allclose(adv, x + 0.01 * (first + 1)[:, None], atol=1e-6)  # target 0: best iterate
    monkeypatch.setattr(_apgd_attack, "STACKED_VALUES", n * x.shape[1] * 2)  # two targets per run
    assert [len(g) for g in _apgd_attack._groups([0, 1, 2, 3, 4], n, x.shape[1])] == [2, 2, 1]


def test_sparse_step_moves_the_top_fraction_with_unit_l1_norm():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(4, 50)).astype(np.float32)
    topk = np.array([0.2, 0.0, 1.0, 0.5], np.float32)
    s = ops.convert_to_numpy(sparse_direction(ops.convert_to_tensor(g), ops.convert_to_tensor(topk)))
    for row, k in zip(range(4), topk):
        moved = np.flatnonzero(s[row])
        expected = 50 - min(int((1 - k) * 50), 49)  # coordinates at or above the floor((1-k) d)-th smallest
        assert len(moved) == expected
        assert set(moved) == set(np.argsort(np.abs(g[row]))[-expected:])
        np.testing.assert_allclose(np.abs(s[row]).sum(), 1.0, rtol=1e-6)
        assert np.all(np.sign(s[row, moved]) == np.sign(g[row, moved]))


def test_l1_schedules():
    assert l1_marks(100) == list(range(4, 101, 4))
    assert l1_marks(10) == list(range(1, 11))
    assert stages(1.0, 100) == [(3.0, 30), (2.0, 30), (1.0, 40)]
    assert stages(1.0, 2) == [(1.0, 2)]


@pytest.mark.parametrize("options", [{}, {"use_largereps": True}, {"targeted": True, "n_target_classes": 3}])
def test_apgd_l1_stays_in_the_ball_and_the_box(digits_cnn, options):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    adv = gradkit.apgd(model, x, y, eps=2.0, norm="l1", steps=12, clip_values=(0, 1), seed=0, batch_size=64,
                       **options)  # fmt: skip
    assert l1_sizes(adv, x).max() <= 2.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y) - 0.3
    assert np.median(np.count_nonzero((adv - x).reshape(len(x), -1), axis=1)) < 64  # sparse


SUMS, DECISIONS = [0.36391, 0.86164, -1.40472, 0.79544, 0.19434, 0.52948], [9, 9, 3, 9, 9, 3]


def test_apgd_l1_gives_the_same_numbers_on_every_backend():
    layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten()]
    model = set_weights_from(keras.Sequential(layers + [keras.layers.Dense(10)]), scale=0.3)
    x = np.random.RandomState(0).rand(6, 8, 8, 1).astype("float32")
    adv = gradkit.apgd(model, x, np.arange(6), eps=1.5, norm=1, steps=10, clip_values=(0, 1), seed=0)
    moved = (adv - x).reshape(6, -1).astype(np.float64)
    sums, decisions = moved.sum(axis=1), model.predict(adv, verbose=0).argmax(axis=1).tolist()
    print(BACKEND, np.round(sums, 5).tolist(), decisions, np.count_nonzero(moved, axis=1).tolist())
    assert l1_sizes(adv, x).max() <= 1.5 and adv.min() >= 0 and adv.max() <= 1
    np.testing.assert_allclose(sums, SUMS, atol=2e-4)
    assert decisions == DECISIONS


def test_l1_bad_input_is_refused_before_any_work(digits_cnn):
    model, x, y = digits_cnn
    with pytest.raises(ValueError, match="`use_largereps` is a schedule of the L1 threat model"):
        gradkit.apgd(model, x[:4], y[:4], eps=0.1, use_largereps=True)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=3'):
        gradkit.apgd(model, x[:4], y[:4], eps=0.1, norm=3)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=\'l0\''):
        gradkit.evaluate(model, x[:4], y[:4], eps=0.1, norm="l0", verbose=0)
