"""`gradkit.certify` with per-feature boxes and a mask (`certificates._api`): on a linear model the
certified margin is exact, the minimum of the margin over each feature's own interval, computed by hand."""

import numpy as np
import pytest

import gradkit
from oracles.linear import D, W, X, labels, linear

MASK = np.array([1, 1, 0, 1, 0, 1, 1, 0, 1, 0], np.float32)
LO = np.full(D, 0.3, np.float32)
HI = np.linspace(0.66, 0.9, D).astype(np.float32)


@pytest.mark.parametrize("method", ["ibp", "crown"])
def test_linear_margins_over_per_feature_boxes_and_a_mask_are_the_hand_computed_minimum(method):
    model = linear()
    y = labels(model)
    eps = 0.05
    cert = gradkit.certify(model, X, y, eps, method=method, clip_values=(LO, HI), mask=MASK)
    w = W[:, 1 - y].T - W[:, y].T  # (n, D): the other class minus the label, per point
    low = np.where(MASK > 0, np.maximum(X - eps, LO), X).astype(np.float64)
    high = np.where(MASK > 0, np.minimum(X + eps, HI), X).astype(np.float64)
    z = X.astype(np.float64) @ W.astype(np.float64) + model.get_weights()[1]
    gap = z[np.arange(len(X)), y] - z[np.arange(len(X)), 1 - y]  # margin at x
    worst = gap - np.sum(np.maximum(w * (low - X), w * (high - X)), axis=1)  # the other class gains most
    np.testing.assert_allclose(cert.margins[np.arange(len(X)), 1 - y], worst, rtol=1e-4, atol=1e-5)
    plain = gradkit.certify(model, X, y, eps, method=method, clip_values=(0, 1))
    assert (cert.margins[np.arange(len(X)), 1 - y] >= plain.margins[np.arange(len(X)), 1 - y] - 1e-6).all()


def test_a_mask_needs_linf():
    model = linear()
    with pytest.raises(ValueError, match="`mask` must be None for norm='l2'"):
        gradkit.certify(model, X, labels(model), 0.1, norm="l2", mask=MASK)
