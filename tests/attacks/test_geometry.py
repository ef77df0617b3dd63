"""The threat models' geometry (`gradkit.attacks.geometry`): the exact projection onto the L1-ball and the
box (the closest point, against a generic solver and by hand, on the device and on the host), the L1 and
L0 ball projections of the minimum-norm attacks by hand, and every attack's examples inside the ball as a
user checks it (float32 and float64, no tolerance)."""

import keras
import numpy as np
import pytest
from keras import ops
from scipy.optimize import minimize

import gradkit
from gradkit.attacks import geometry
from helpers.models import accuracy, l1_sizes

from conftest import BACKEND


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


def test_l1_and_l0_projections_by_hand():
    from gradkit.attacks.geometry import project_l0_ball, project_l1_ball

    v = keras.ops.convert_to_tensor(
        np.array([[3.0, -1.0, 0.5], [1.0, 1.0, 1.0], [0.5, -0.5, 0.0]], "float32")
    )
    eps = keras.ops.convert_to_tensor(np.array([2.0, 1.5, 2.0], "float32"))
    # Duchi et al.: theta = 1 (row 0), 0.5 (row 1); row 2 lies inside and is unchanged
    expected = [[2.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.0]]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(project_l1_ball(v, eps)), expected, atol=1e-6)
    w = keras.ops.convert_to_tensor(np.array([[0.1, -3.0, 2.0, 0.5]], "float32"))
    k = keras.ops.convert_to_tensor(np.array([2.0], "float32"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(project_l0_ball(w, k)), [[0.0, -3.0, 2.0, 0.0]])


@pytest.mark.parametrize("norm, eps", [(np.inf, 0.1), (np.inf, 8 / 255), (2, 1.0)])
def test_examples_are_in_the_ball_exactly_as_a_user_checks_it(digits_mlp, norm, eps):
    """`x0 + float32(0.1)` can lie 0.10000002 from `x0`; every attack's examples are within eps in
    float32 and in float64 arithmetic (no tolerance), and inside the box."""
    model, x, y = digits_mlp
    common = dict(eps=eps, norm=norm, clip_values=(0, 1))
    examples = {
        "fgsm": gradkit.fgsm(model, x, y, **common),
        "pgd": gradkit.pgd(model, x, y, eps_step=eps / 4, steps=5, random_start=True, seed=0, **common),
        "apgd": gradkit.apgd(model, x, y, steps=10, seed=0, **common),
        "apgd-t": gradkit.apgd(model, x, y, steps=5, targeted=True, n_target_classes=2, seed=0, **common),
        "square": gradkit.square(model, x, y, n_queries=30, seed=0, **common),
        "evaluate": gradkit.evaluate(model, x, y, steps=5, n_queries=30, verbose=0, **common).x_adv,
    }
    for name, adv in examples.items():
        assert adv.dtype == np.float32 and adv.min() >= 0 and adv.max() <= 1, name
        for dtype in (np.float32, np.float64):
            delta = (adv.astype(dtype) - x.astype(dtype)).reshape(len(x), -1)
            size = np.abs(delta).max(axis=1) if norm == np.inf else np.linalg.norm(delta, axis=1)
            assert size.max() <= eps, (name, dtype, float(size.max()))
        if norm == np.inf and name != "square":  # sign steps end on the ball's face: eps to 1e-7
            assert np.abs(adv - x).max() > eps - 1e-7, name


@pytest.mark.parametrize("attack", ["fgsm", "bim", "pgd"])
def test_l1_gradient_attacks_stay_in_the_ball_and_the_box(digits_cnn, attack):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    kw = {} if attack == "fgsm" else {"eps_step": 0.5, "steps": 8}
    adv = getattr(gradkit, attack)(model, x, y, eps=2.0, norm=1, clip_values=(0, 1), **kw)
    assert l1_sizes(adv, x).max() <= 2.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y)


@pytest.mark.parametrize("host", [False, True])
def test_each_direction_is_its_norms_dual_maximizer(host):
    """`direction(g, p)` has unit p-norm and attains the dual norm, <g, d> = ||g||_q with 1/p + 1/q = 1
    (the steepest ascent over the unit ball): Linf -> ||g||_1, L2 -> ||g||_2, L1 -> ||g||_inf."""
    g = np.random.default_rng(2).normal(0, 1, (5, 3, 4)).astype(np.float32)
    rows = g.reshape(5, -1).astype(np.float64)
    for norm in (np.inf, 2.0, 1.0):
        if host:
            d = geometry.direction(g, norm)
        else:
            d = ops.convert_to_numpy(geometry.direction_tensor(ops.convert_to_tensor(g), norm))
        d = d.reshape(5, -1).astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(d, ord=norm, axis=1), 1.0, rtol=1e-6)
        dual = np.linalg.norm(rows, ord=geometry.DUAL[norm], axis=1)
        np.testing.assert_allclose((rows * d).sum(axis=1), dual, rtol=1e-5)


def steepest(g, budget, lo=None, hi=None, host=False):
    g, lo, hi = (None if a is None else np.asarray(a, np.float32) for a in (g, lo, hi))
    if host:
        return geometry.steepest_l1(g, budget, lo, hi)
    args = [None if a is None else ops.convert_to_tensor(a) for a in (g, lo, hi)]
    return ops.convert_to_numpy(geometry.steepest_l1_tensor(args[0], budget, args[1], args[2]))


@pytest.mark.parametrize("host", [False, True])
def test_steepest_l1_step_by_hand(host):
    g = [[1.0, -3.0, 2.0], [1.0, -1.0, 0.5], [0.0, 0.0, 0.0], [-2.0, 2.0, 1.0]]
    # no box: all on the largest |g| (ties: the first), a zero gradient does not move
    out = steepest(g, 0.5, host=host)
    np.testing.assert_allclose(out, [[0, -0.5, 0], [0.5, 0, 0], [0, 0, 0], [-0.5, 0, 0]])
    # a box: the largest |g| fills its room, the rest goes to the next (a fractional knapsack)
    lo = [[-1, -0.1, -1], [-1, -1, -1], [-1] * 3, [-0.2, -1, -1]]
    hi = [[1, 1, 0.3], [0, 1, 1], [1] * 3, [1, 0.1, 1]]
    out = steepest(g, 0.5, lo, hi, host=host)
    np.testing.assert_allclose(out, [[0.1, -0.1, 0.3], [0, -0.5, 0], [0, 0, 0], [-0.2, 0.1, 0.2]], atol=1e-7)
    np.testing.assert_allclose(steepest(g, 9.0, lo, hi, host=host)[0], [1.0, -0.1, 0.3])  # room < budget


def test_steepest_l1_step_maximizes_the_linear_gain_over_the_ball_and_the_box():
    """Against scipy's linear program: <g, d> is the maximum over ||d||_1 <= eps, lo <= d <= hi."""
    from scipy.optimize import linprog

    rng = np.random.default_rng(3)
    for _ in range(5):
        g, x0 = rng.normal(0, 1, (1, 6)).astype(np.float32), rng.uniform(0, 1, (1, 6)).astype(np.float32)
        d = steepest(g, 0.8, -x0, 1 - x0)
        # d = u - v with u, v >= 0: max g.(u - v) s.t. sum(u + v) <= eps, u <= hi, v <= -lo
        c = np.concatenate([-g[0], g[0]]).astype(np.float64)
        bounds = [(0, h) for h in 1 - x0[0]] + [(0, -lo) for lo in -x0[0]]
        best = linprog(c, A_ub=np.ones((1, 12)), b_ub=[0.8], bounds=bounds)
        assert np.abs(d).sum() <= 0.8 + 1e-6 and np.all(d >= -x0 - 1e-7) and np.all(d <= 1 - x0 + 1e-7)
        np.testing.assert_allclose(float((g * d).sum()), -best.fun, rtol=1e-5)
