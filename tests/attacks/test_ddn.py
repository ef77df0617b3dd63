"""DDN (`gradkit.attacks.ddn`): the closed-form minimal L2 perturbation of a two-class linear model
(`oracles.linear`)."""

import numpy as np

import gradkit
from oracles.linear import X, curved, exact, labels, labels_of, lp


def test_ddn_reaches_the_closed_form_l2_minimum():
    model = curved()
    y = labels(model)
    adv = gradkit.ddn(model, X, y, steps=100, clip_values=(0, 1))
    assert (labels_of(model, adv) != y).all() and (adv >= 0).all() and (adv <= 1).all()
    ratio = lp(adv - X, 2) / exact(X, y, 2)  # eps moves by a factor 1 +- gamma (0.05) per step
    assert (ratio >= 1 - 1e-5).all() and (ratio <= 1.06).all() and np.median(ratio) < 1.01
