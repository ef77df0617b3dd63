"""Per-feature Linf budgets in APGD and Square (`gradkit.attacks.apgd`, `square`, `_frame.broadcast_eps`):
each returned point within its own budget `|x_adv_i - x_i| <= eps_i` and its box, features of budget 0
bit-identical, the linear closed form `margin < sum_i eps_i |w_i|` on both sides, and a constant array
giving the scalar eps' outputs bit for bit."""

import numpy as np
import pytest

import gradkit
from helpers.models import random_images, small_cnn
from oracles.linear import C, D, W, X, labels, labels_of, linear

BUDGET = np.linspace(0.0, 0.2, D).astype(np.float32)  # feature 0 has no budget
MASK = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 1], np.float32)

ATTACKS = {
    "apgd": lambda m, x, y, eps, **k: gradkit.apgd(m, x, y, eps=eps, steps=10, seed=0, **k),
    "apgd-t": lambda m, x, y, eps, **k: gradkit.apgd(
        m, x, y, eps=eps, steps=5, targeted=True, n_target_classes=1, seed=0, **k
    ),
    "square": lambda m, x, y, eps, **k: gradkit.square(m, x, y, eps=eps, seed=0, **({"n_queries": 60} | k)),
}


def holder_bound(eps):
    """`|a|` against `sum_i eps_i |w_1,i - w_0,i|` for `linear()`'s decision `a = x @ (w_1 - w_0) + C`:
    the Linf box of budgets `eps` around x holds a point of the other class iff the bound exceeds `|a|`
    (the worst corner is `x - sign(a) eps sign(w)`; no clip range)."""
    w = (W[:, 1] - W[:, 0]).astype(np.float64)
    return np.abs(X.astype(np.float64) @ w + C), float(np.abs(w) @ np.asarray(eps, np.float64))


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_point_stays_in_its_own_budget_and_box_and_unbudgeted_features_stay(name):
    model = linear()
    y = labels(model)
    lo, hi = np.full(D, 0.4, np.float32), np.full(D, 0.7, np.float32)
    x = np.clip(X, lo, hi)
    x_adv = ATTACKS[name](model, x, y, BUDGET, clip_values=(lo, hi), mask=MASK)
    assert x_adv.shape == x.shape and x_adv.dtype == np.float32
    assert (np.abs(x_adv.astype(np.float64) - x) <= BUDGET).all()  # exactly, in float64
    assert (x_adv >= lo).all() and (x_adv <= hi).all()
    fixed = (BUDGET == 0) | (MASK == 0)
    np.testing.assert_array_equal(x_adv[:, fixed], x[:, fixed])  # bit for bit
    moved = np.abs(x_adv - x)[:, ~fixed]
    assert (moved > 0).any() and (moved.max(axis=0) <= BUDGET[~fixed]).all()


@pytest.mark.parametrize("name", ["apgd", "square"])
def test_linear_worst_case_is_the_holder_bound_on_both_sides(name):
    model = linear()
    y = labels(model)
    margin, bound = holder_bound(BUDGET)
    scale = float(np.median(margin / bound))  # half the points on each side of the boundary
    keep = np.abs(margin / (scale * bound) - 1) > 0.1  # none within 10% of it
    eps = (scale * BUDGET).astype(np.float32)
    x_adv = ATTACKS[name](model, X[keep], y[keep], eps, **({"n_queries": 300} if name == "square" else {}))
    broken = labels_of(model, x_adv) != y[keep]
    expected = margin[keep] < holder_bound(eps)[1]
    assert expected.any() and (~expected).any()
    np.testing.assert_array_equal(broken, expected)


@pytest.mark.parametrize("name", ["apgd", "square"])
def test_a_constant_array_eps_gives_the_scalar_outputs_bit_for_bit(name):
    model = linear()
    y = labels(model)
    scalar = ATTACKS[name](model, X, y, 0.05, clip_values=(0.0, 1.0))
    array = ATTACKS[name](model, X, y, np.full(D, 0.05, np.float32), clip_values=(0.0, 1.0))
    np.testing.assert_array_equal(array, scalar)
    assert (array != X).any()


def test_square_reads_a_per_channel_budget_in_the_model_layout():
    model, (x, y) = small_cnn(), random_images(6)
    eps = np.array([0.0, 0.1], np.float32)  # channel 0 fixed, channel 1 up to 0.1
    x_adv = gradkit.square(model, x, y, eps=eps, n_queries=20, seed=0, clip_values=(0.0, 1.0))
    np.testing.assert_array_equal(x_adv[..., 0], x[..., 0])
    d = np.abs(x_adv[..., 1].astype(np.float64) - x[..., 1])
    assert d.max() <= eps[1] and (d > 0.05).any()  # eps as float32, as the attack reads it


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, y: gradkit.apgd(m, X, y, eps=np.full(D, 0.1), norm=2), ValueError, "needs norm=np.inf"),
        (lambda m, y: gradkit.square(m, X, y, eps=np.full(D, 0.1), norm=1), ValueError, "needs norm=np.inf"),
        (
            lambda m, y: gradkit.apgd(m, X, y, eps=np.full(3, 0.1)),
            ValueError,
            r"`eps` must broadcast.*\(10,\)",
        ),
        (lambda m, y: gradkit.square(m, X, y, eps=-BUDGET), ValueError, "`eps` must be a finite number >= 0"),
    ],
)
def test_bad_budgets_are_refused_before_any_work(call, error, match):
    model = linear()
    with pytest.raises(error, match=match):
        call(model, labels(model))
