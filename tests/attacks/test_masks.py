"""Per-feature boxes, masks and per-feature Linf budgets (`gradkit.attacks._frame`, `geometry`): the
features a mask holds fixed stay bit-identical through every attack, every returned point lies in its
own box, the masked minimal Linf distance of a linear model in closed form, per-feature eps, bad input."""

import keras
import numpy as np
import pytest

import gradkit
from oracles.linear import C, D, W, X, curved, labels, labels_of, lp

MASK = np.array([1, 1, 0, 1, 0, 1, 1, 0, 1, 0], np.float32)  # 6 of the 10 features may change
LO = np.linspace(0.0, 0.3, D).astype(np.float32)  # a box per feature, holding every point of X
HI = np.linspace(0.7, 1.0, D).astype(np.float32)[::-1].copy()

ATTACKS = {
    "fgsm": lambda m, x, y, norm, **k: gradkit.fgsm(m, x, y, eps=EPS[norm], norm=norm, **k),
    "pgd": lambda m, x, y, norm, **k: gradkit.pgd(
        m, x, y, eps=EPS[norm], eps_step=EPS[norm] / 4, steps=8, norm=norm, seed=0, **k
    ),
    "apgd": lambda m, x, y, norm, **k: gradkit.apgd(m, x, y, eps=EPS[norm], norm=norm, steps=10, **k),
    "square": lambda m, x, y, norm, **k: gradkit.square(
        m, x, y, eps=EPS[norm], norm=norm, n_queries=30, seed=0, **k
    ),
    "fab": lambda m, x, y, norm, **k: gradkit.fab(m, x, y, norm=norm, steps=10, **k),
    "fmn": lambda m, x, y, norm, **k: gradkit.fmn(m, x, y, norm=norm, steps=20, **k),
    "ddn": lambda m, x, y, norm, **k: gradkit.ddn(m, x, y, steps=20, **k),
}
EPS = {np.inf: 0.25, 2: 0.6, 1: 1.5}
CASES = [(name, np.inf) for name in ATTACKS if name != "ddn"] + [
    ("apgd", 2),
    ("apgd", 1),
    ("square", 2),
    ("ddn", 2),
]


@pytest.mark.parametrize("name, norm", CASES)
def test_masked_features_stay_bit_identical_and_points_stay_in_their_own_box(name, norm):
    model = curved()
    y = labels(model)
    x_adv = ATTACKS[name](model, X, y, norm, clip_values=(LO, HI), mask=MASK)
    assert x_adv.shape == X.shape and x_adv.dtype == np.float32
    np.testing.assert_array_equal(x_adv[:, MASK == 0], X[:, MASK == 0])  # bit for bit
    assert (x_adv >= LO).all() and (x_adv <= HI).all()  # each feature inside its own bounds
    moved = np.any(x_adv != X, axis=1)
    assert moved.any() and (labels_of(model, x_adv)[moved] != y[moved]).mean() > 0.5


def masked_distance(x, y_sign=None):
    """The smallest Linf perturbation of the features of MASK that flips `curved()`'s decision:
    |a| / sum_{i: mask_i = 1} |w_1,i - w_0,i| (Hoelder on the changeable features; no box)."""
    w = W[:, 1] - W[:, 0]
    return np.abs(x.astype(np.float64) @ w + C) / np.abs(w * MASK).sum()


@pytest.mark.parametrize("name", ["fmn", "fab"])
def test_minimum_norm_attacks_reach_the_masked_closed_form(name):
    model = curved()
    y = labels(model)
    x_adv = ATTACKS[name](model, X, y, np.inf, mask=MASK)
    np.testing.assert_array_equal(x_adv[:, MASK == 0], X[:, MASK == 0])
    assert (labels_of(model, x_adv) != y).all()
    np.testing.assert_allclose(lp(x_adv - X, np.inf), masked_distance(X), rtol=0.02)


def test_evaluate_with_a_mask_agrees_with_the_closed_form_above_and_below():
    model, y = curved(), labels(curved())
    d = masked_distance(X)
    for eps in (np.median(d) * 0.98, np.median(d) * 1.02):
        keep = np.abs(d / eps - 1) > 0.01  # no point within 1% of the threshold
        result = gradkit.evaluate(
            model, X[keep], y[keep], eps=float(eps), attacks=["apgd-ce"], mask=MASK, steps=20, verbose=0
        )
        np.testing.assert_array_equal(result.robust, d[keep] > eps)
        np.testing.assert_array_equal(result.x_adv[:, MASK == 0], X[keep][:, MASK == 0])


def test_fgsm_with_per_feature_eps_moves_each_feature_by_its_own_budget():
    model = curved()
    y = labels(model)
    eps = np.linspace(0.01, 0.1, D).astype(np.float32)
    x_adv = gradkit.fgsm(model, X, y, eps=eps)
    w = W[:, 1] - W[:, 0]
    towards = np.where(y[:, None] == 1, -np.sign(w), np.sign(w))  # up the loss: towards the other class
    np.testing.assert_allclose(x_adv - X, towards * eps, atol=1e-6)
    assert (np.abs(x_adv.astype(np.float64) - X) <= eps).all()  # inside the ball exactly
    pgd = gradkit.pgd(model, X, y, eps=eps, eps_step=0.02, steps=5, seed=0)
    assert (np.abs(pgd.astype(np.float64) - X) <= eps).all()


def test_a_mask_of_ones_and_a_box_of_scalars_change_nothing():
    model, y = curved(), labels(curved())
    plain = gradkit.pgd(model, X, y, eps=0.1, eps_step=0.03, steps=5, seed=0, clip_values=(0, 1))
    ones = gradkit.pgd(
        model, X, y, eps=0.1, eps_step=0.03, steps=5, seed=0, clip_values=(np.zeros(D), np.ones(D)), mask=1
    )
    np.testing.assert_allclose(ones, plain, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(mask=np.ones(3)), ValueError, r"`mask` must broadcast to one input's shape \(10,\)"),
        (dict(mask=np.full(D, 0.5)), ValueError, "`mask` must be None or an array of 0 and 1"),
        (dict(clip_values=(HI, LO)), ValueError, "`clip_values` must be a pair \\(lo, hi\\)"),
        (dict(clip_values=(np.full(D, 0.5), 1.0)), ValueError, "per-feature clip_values"),
        (dict(eps=np.full(D, 0.1), norm=2), ValueError, "needs norm=np.inf"),
    ],
)
def test_bad_boxes_masks_and_budgets_are_refused_before_any_work(kwargs, error, match):
    model = curved()
    options = dict(eps=0.1, eps_step=0.05, steps=2) | kwargs
    with pytest.raises(error, match=match):
        gradkit.pgd(model, X, labels(model), **options)


def test_breast_cancer_mlp_evaluated_with_the_data_boxes():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x = data.data.astype(np.float32)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((30,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:400], data.target[:400], epochs=10, batch_size=64, verbose=0)
    lo, hi = x.min(0), x.max(0)  # per feature: the data's own range
    test, y = x[400:460], data.target[400:460]
    result = gradkit.evaluate(
        model,
        test,
        y,
        eps=0.5,
        attacks=["apgd-ce", "square"],
        clip_values=(lo, hi),
        steps=10,
        n_queries=50,
        verbose=0,
    )
    assert (result.x_adv >= lo).all() and (result.x_adv <= hi).all()
    assert np.abs(result.x_adv - test).max() <= 0.5
    at_bounds = (result.x_adv == lo) | (result.x_adv == hi)
    assert at_bounds[(test - 0.5 < lo) | (test + 0.5 > hi)].any()  # the box bound the attack somewhere
    assert result.clean_accuracy > 0.9 and result.robust_accuracy < result.clean_accuracy
    assert result.clip_values == (float(lo.min()), float(hi.max()))
