"""The L1 threat model: the exact projection onto the L1-ball and the box, APGD-L1's sparse step, APGD-L1
(Croce & Hein 2021) and the L1 gradient attacks inside the ball and the box, the same numbers on every
backend, `evaluate` with norm=1, and parity with adv-lib 0.2.8's L1 APGD on PyTorch."""

import keras
import numpy as np
import pytest
from keras import ops
from scipy.optimize import minimize
from sklearn.datasets import load_digits

import gradkit
from gradkit import _checks
from gradkit.attacks import geometry
from gradkit.attacks.apgd import l1_marks, sparse_direction, stages

from conftest import BACKEND, set_weights_from

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _device_projection():
    """`project_l1_box` as the attacks run it: compiled whole on JAX (op by op, eager JAX compiles each
    op anew for every shape)."""
    if BACKEND != "jax":
        return geometry.project_l1_box
    import jax

    return jax.jit(geometry.project_l1_box)


DEVICE_PROJECTION = _device_projection()


def project(v, eps, lo=None, hi=None, host=False):
    """The projection of the rows `v` `(n, d)` (or one row `(d,)`), on the device or on the host."""
    one = np.ndim(v) == 1
    v, lo, hi = (None if a is None else np.atleast_2d(np.asarray(a, np.float32)) for a in (v, lo, hi))
    eps = np.asarray(eps, np.float32)
    if host:
        out = geometry.project_l1_box_host(v, eps, lo, hi)
    else:
        tensors = [None if a is None else ops.convert_to_tensor(a) for a in (v, eps, lo, hi)]
        out = ops.convert_to_numpy(DEVICE_PROJECTION(*tensors)).astype(np.float64)
    return out[0] if one else out


def reference(v, eps, lo, hi):
    """The projection of one row by bisection on the threshold in float64 (the KKT form)."""
    a, room = np.abs(v), np.where(v >= 0, hi, -lo)

    def size(lam):
        return np.clip(a - lam, 0, room).sum()

    low, high = 0.0, a.max()
    if size(0.0) <= eps:
        high = 0.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if size(mid) > eps else (low, mid)
    return np.sign(v) * np.clip(a - high, 0, room)


@pytest.mark.parametrize("host", [False, True])
def test_projection_is_the_closest_point_of_the_ball_and_the_box(host):
    rng = np.random.default_rng(0)
    for d in (3, 40):
        x0 = rng.uniform(0, 1, (60, d)).astype(np.float32)
        v = (rng.normal(0, 1, (60, d)) * rng.choice([0.1, 1.0, 3.0], (60, 1))).astype(np.float32)
        eps = rng.choice([0.0, 0.1, 0.5, 1.0, 3.0], 60).astype(np.float32)
        out = project(v, eps, -x0, 1 - x0, host=host)
        assert np.all(np.abs(out).sum(axis=1) <= eps * (1 + 1e-6) + 1e-7)
        assert np.all(out >= -x0 - 1e-7) and np.all(out <= 1 - x0 + 1e-7)
        for row in range(60):
            expected = reference(v[row].astype(np.float64), float(eps[row]), -x0[row], 1 - x0[row])
            np.testing.assert_allclose(out[row], expected, atol=2e-6)


def test_projection_agrees_with_a_generic_solver():
    rng = np.random.default_rng(1)
    for _ in range(5):
        x0, v, eps = rng.uniform(0, 1, 6), rng.normal(0, 1, 6), 0.8
        cons = [{"type": "ineq", "fun": lambda d, eps=eps: eps - np.abs(d).sum()}]
        best = minimize(lambda d, v=v: np.sum((d - v) ** 2), np.zeros(6), method="SLSQP", constraints=cons,
                        bounds=list(zip(-x0, 1 - x0)), options={"ftol": 1e-12, "maxiter": 500})  # fmt: skip
        out = project(v, eps, -x0, 1 - x0, host=True)
        assert np.sum((out - v) ** 2) <= best.fun + 1e-5  # no feasible point is closer
        np.testing.assert_allclose(out, best.x, atol=2e-3)


@pytest.mark.parametrize("host", [False, True])
def test_projection_hand_cases(host):
    v = [[0.2, -0.3, 0.0], [3.0, -1.0, 0.5], [3.0, -1.0, 0.5], [1.0, -2.0, 0.0]]
    lo, hi = [[-1, -1, -1], [-9] * 3, [-2] * 3, [-1] * 3], [[1, 0.1, 1], [9] * 3, [1] * 3, [1] * 3]
    out = project(v, [1.0, 3.0, 2.5, 0.0], lo, hi, host=host)
    np.testing.assert_allclose(out[0], [0.2, -0.3, 0.0])  # inside the ball and the box: unchanged
    np.testing.assert_allclose(out[1], [2.5, -0.5, 0.0], atol=1e-6)  # soft threshold at 0.5
    np.testing.assert_allclose(out[2], [1.0, -1.0, 0.5], atol=1e-6)  # the box caps 3 at 1: threshold 0
    assert np.all(out[3] == 0)  # eps 0
    np.testing.assert_allclose(
        project([3.0, -1.0, 0.5], 3.0, host=host), [2.5, -0.5, 0.0], atol=1e-6
    )  # no box


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


def test_check_norm_takes_the_callers_set():
    assert _checks.check_norm("L1", allowed=_checks.GRADIENT_NORMS) == 1.0
    assert _checks.check_norm(0, allowed=(0, 1, 2, np.inf)) == 0.0
    with pytest.raises(ValueError, match=r"`norm` must be np.inf .* or 2 \(or \"l2\"\). Received: norm=1"):
        _checks.check_norm(1)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=3'):
        _checks.check_norm(3, allowed=_checks.GRADIENT_NORMS)


@pytest.fixture(scope="module")
def digits_cnn():
    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.images / 16.0).astype("float32")[..., None], d.target
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10)])  # fmt: skip
    model.compile(keras.optimizers.Adam(0.01), LOGITS_CE)
    model.fit(x[:1400], y[:1400], epochs=6, batch_size=64, verbose=0)
    return model, x[1400:1700], y[1400:1700]


def accuracy(model, x, y):
    return float(np.mean(model.predict(x, verbose=0).argmax(axis=1) == y))


def l1_sizes(adv, x):
    return np.abs(adv.astype(np.float64) - x).reshape(len(x), -1).sum(axis=1)


@pytest.mark.parametrize("options", [{}, {"use_largereps": True}, {"targeted": True, "n_target_classes": 3}])
def test_apgd_l1_stays_in_the_ball_and_the_box(digits_cnn, options):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    adv = gradkit.apgd(model, x, y, eps=2.0, norm="l1", steps=12, clip_values=(0, 1), seed=0, batch_size=64,
                       **options)  # fmt: skip
    assert l1_sizes(adv, x).max() <= 2.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y) - 0.3
    assert np.median(np.count_nonzero((adv - x).reshape(len(x), -1), axis=1)) < 64  # sparse


@pytest.mark.parametrize("attack", ["fgsm", "bim", "pgd"])
def test_l1_gradient_attacks_stay_in_the_ball_and_the_box(digits_cnn, attack):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    kw = {} if attack == "fgsm" else {"eps_step": 0.5, "steps": 8}
    adv = getattr(gradkit, attack)(model, x, y, eps=2.0, norm=1, clip_values=(0, 1), **kw)
    assert l1_sizes(adv, x).max() <= 2.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y)


def test_square_l1_stays_in_the_ball_and_the_box(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    adv = gradkit.square(model, x, y, eps=3.0, norm=1, n_queries=100, clip_values=(0, 1), seed=0)
    assert l1_sizes(adv, x).max() <= 3.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y) - 0.2


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


# the same on TensorFlow, JAX and PyTorch (each moves 4 to 9 of the 64 pixels)
SUMS, DECISIONS = [0.36391, 0.86164, -1.40472, 0.79544, 0.19434, 0.52948], [9, 9, 3, 9, 9, 3]


def test_evaluate_l1_runs_autoattacks_l1_cascade(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:48], y[:48]
    result = gradkit.evaluate(model, x, y, eps=2.0, norm=1, clip_values=(0, 1), steps=10, n_queries=50,
                              batch_size=48, verbose=0)  # fmt: skip
    assert result.attacks == ["apgd-ce", "apgd-t", "fab-t", "square"]  # AutoAttack's L1 standard list
    assert result.to_dict()["norm"] == "l1" and "(L1)" in result.summary()
    assert l1_sizes(result.x_adv, x).max() <= 2.0
    assert accuracy(model, result.x_adv, y) == result.robust_accuracy < result.clean_accuracy - 0.3
    steps = [result.per_attack[name]["robust_accuracy"] for name in result.attacks]
    assert steps == sorted(steps, reverse=True) and steps[-1] == result.robust_accuracy  # the cascade
    curve = gradkit.robustness_curve(model, x, y, attack="apgd", epsilons=[0.0, 1.0, 3.0], norm=1, steps=10,
                                     clip_values=(0, 1), seed=0, batch_size=48)  # fmt: skip
    assert curve["accuracy"][0] == accuracy(model, x, y)
    assert curve["accuracy"][2] < curve["accuracy"][0] - 0.3  # the L1 attack ran at every eps


def test_l1_bad_input_is_refused_before_any_work(digits_cnn):
    model, x, y = digits_cnn
    with pytest.raises(ValueError, match="`use_largereps` is a schedule of the L1 threat model"):
        gradkit.apgd(model, x[:4], y[:4], eps=0.1, use_largereps=True)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=3'):
        gradkit.apgd(model, x[:4], y[:4], eps=0.1, norm=3)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=\'l0\''):
        gradkit.evaluate(model, x[:4], y[:4], eps=0.1, norm="l0", verbose=0)


STEPS, SEEDS = 20, (0, 1)


@pytest.mark.skipif(BACKEND != "torch", reason="adv-lib runs on PyTorch")
@pytest.mark.parametrize("eps", [2.0, 4.0])
@pytest.mark.parametrize("largereps", [False, True])
def test_apgd_l1_within_one_point_of_adv_lib(digits_cnn, eps, largereps):
    import torch

    from conftest import import_adv_lib

    attacks = import_adv_lib()  # a pinned test dependency: its absence is a failure, not a skip
    model, x, y = digits_cnn
    ours, theirs = [], []
    for seed in SEEDS:  # one seed moves either figure by about a point on 300 points: two are averaged
        adv = gradkit.apgd(model, x, y, eps=eps, norm=1, steps=STEPS, clip_values=(0, 1), seed=seed,
                           use_largereps=largereps)  # fmt: skip
        ours.append(accuracy(model, adv, y))
        torch.manual_seed(seed)
        adv = attacks.apgd(model, torch.from_numpy(x), torch.from_numpy(y.astype("int64")), eps=eps, norm=1,
                           n_iter=STEPS, loss_function="ce", use_large_reps=largereps)  # fmt: skip
        theirs.append(accuracy(model, adv.detach().numpy(), y))
    ours, theirs = float(np.mean(ours)), float(np.mean(theirs))
    print(f"APGD-L1 eps {eps} largereps {largereps}: gradkit {ours:.3f}, adv-lib {theirs:.3f}")
    assert accuracy(model, x, y) - ours > 0.3  # the attack does something on this model
    assert ours <= theirs + 0.01, (ours, theirs)
