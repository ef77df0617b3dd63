"""`gradkit.min_norm` (`gradkit.evaluation._min_norm`): the per-sample smallest norms, the examples and the
curve from one run, FAB among its attacks at the closed form of a linear model, bad input."""

import numpy as np
import pytest

import gradkit
from oracles.linear import X, curved, exact, labels, lp


def test_min_norm_norms_examples_and_curve():
    model = curved()
    y = labels(model)
    y[:2] = 1 - y[:2]  # two points misclassified clean: norm 0
    result = gradkit.min_norm(model, X, y, norm=2, attacks=("fmn", "ddn"), steps=100, clip_values=(0, 1))
    assert result.norms.dtype == np.float64 and result.norms.shape == (12,)
    assert (result.norms[:2] == 0).all() and list(result.best_attack[:2]) == ["clean", "clean"]
    np.testing.assert_allclose(result.norms[2:], exact(X[2:], y[2:], 2), rtol=0.01)
    np.testing.assert_allclose(lp(result.x_adv - X, 2), result.norms, rtol=1e-6, atol=1e-7)
    assert set(result.best_attack[2:]) <= {"fmn", "ddn"}
    eps = [0.0, 0.05, 0.1, 0.2, 0.4, 1.0]
    curve = result.curve(eps)
    assert curve == sorted(curve, reverse=True)
    assert curve == [float(np.mean(result.norms > e)) for e in eps] and curve[0] == 10 / 12
    through = gradkit.robustness_curve(model, X, y, attack="fmn", epsilons=eps, norm=2, steps=100,
                                       clip_values=(0, 1))  # fmt: skip
    fmn_only = gradkit.min_norm(model, X, y, norm=2, steps=100, clip_values=(0, 1))
    assert through["accuracy"] == fmn_only.curve(eps)


@pytest.mark.parametrize("norm", [2, np.inf, 1])
def test_fab_in_min_norm_reaches_the_closed_form_and_the_minimum_is_kept(norm):
    model = curved()
    y = labels(model)
    fab = gradkit.min_norm(model, X, y, norm=norm, attacks="fab", steps=30, clip_values=(0, 1))
    np.testing.assert_allclose(fab.norms, exact(X, y, norm), rtol=0.01)
    both = gradkit.min_norm(model, X, y, norm=norm, attacks=("fmn", "fab"), steps=30, clip_values=(0, 1))
    assert np.all(both.norms <= fab.norms) and set(both.best_attack) <= {"fmn", "fab"}
    np.testing.assert_allclose(lp(both.x_adv - X, norm), both.norms, rtol=1e-5)
