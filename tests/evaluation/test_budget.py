"""A per-feature Linf budget in `gradkit.evaluate` (`evaluation._budget`): the cascade breaks exactly the
points of a linear model inside the Hoelder bound `margin < sum_i eps_i |w_i|`, callables get the budget
and are checked per feature, FAB is skipped from a version and refused in a list, bad budgets refused."""

import numpy as np
import pytest

import gradkit
from helpers.models import random_images, small_cnn
from oracles.linear import C, D, W, X, labels, linear

BUDGET = np.linspace(0.0, 0.2, D).astype(np.float32)  # feature 0 has no budget


def holder_bound(eps):
    """`(|a|, sum_i eps_i |w_1,i - w_0,i|)` for `linear()`'s decision `a = x @ (w_1 - w_0) + C`: a point
    is broken within the budgets iff the bound exceeds `|a|` (no clip range)."""
    w = (W[:, 1] - W[:, 0]).astype(np.float64)
    return np.abs(X.astype(np.float64) @ w + C), float(np.abs(w) @ np.asarray(eps, np.float64))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, y: gradkit.evaluate(m, X, y, eps=BUDGET, attacks=["fab"], verbose=0), ValueError, "FAB"),
        (lambda m, y: gradkit.evaluate(m, X, y, eps=BUDGET, certify="ibp", verbose=0), ValueError, "certif"),
        (lambda m, y: gradkit.evaluate(m, X, y, eps=BUDGET, norm=2, verbose=0), ValueError, "norm=np.inf"),
    ],
)
def test_bad_budgets_are_refused_before_any_work(call, error, match):
    model = linear()
    with pytest.raises(error, match=match):
        call(model, labels(model))


def test_evaluate_with_a_per_feature_budget_breaks_exactly_the_points_inside_the_holder_bound():
    model = linear()
    y = labels(model)
    margin, bound = holder_bound(BUDGET)
    scale = float(np.median(margin / bound))
    keep = np.abs(margin / (scale * bound) - 1) > 0.1
    eps = (scale * BUDGET).astype(np.float32)
    result = gradkit.evaluate(model, X[keep], y[keep], eps=eps, attacks=["apgd-ce"], steps=10, verbose=0)
    np.testing.assert_array_equal(result.robust, margin[keep] > holder_bound(eps)[1])
    assert result.eps == pytest.approx(float(eps.max()))  # one radius in the report: the max
    assert (np.abs(result.x_adv.astype(np.float64) - X[keep]) <= eps).all()


def test_evaluate_gives_callables_the_budget_and_checks_each_feature_against_it():
    model = linear()
    y = labels(model)

    def corner(m, x, y, eps):
        return x + eps * np.sign(W[:, 0] - W[:, 1])

    def too_far(m, x, y, eps):  # within the max, beyond feature 0's zero budget
        return x + np.float32(eps.max()) * (np.arange(D) == 0)

    result = gradkit.evaluate(model, X, y, eps=BUDGET, attacks=[corner], verbose=0)
    assert 0 < result.robust_accuracy < 1
    with pytest.raises(ValueError, match="inside the eps-ball"):
        gradkit.evaluate(model, X, y, eps=BUDGET, attacks=[too_far], verbose=0)


def test_evaluate_skips_fab_in_a_version_with_a_per_feature_budget():
    model, (x, y) = small_cnn(), random_images(6)
    eps = np.array([0.0, 0.05], np.float32)
    result = gradkit.evaluate(model, x, y, eps=eps, clip_values=(0.0, 1.0), steps=5, n_queries=20, verbose=0)
    assert "fab-t" in dict(result.skipped) and "per-feature" in dict(result.skipped)["fab-t"]
    np.testing.assert_array_equal(result.x_adv[..., 0], x[..., 0])
    assert np.abs(result.x_adv[..., 1].astype(np.float64) - x[..., 1]).max() <= eps[1]
