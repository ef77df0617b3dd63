"""Wilson intervals, McNemar's exact test (`gradkit.compare`): hand computations, scipy, real evaluations."""

import math

import keras
import numpy as np
import pytest
from scipy.stats import binomtest

import gradkit
from gradkit.evaluation import Evaluation, paired_comparison, wilson_interval


def _by_hand(k, n, z=1.959963984540054):
    """The Wilson bounds as the roots of (p - k/n)^2 = z^2 p (1 - p) / n, a quadratic in p."""
    phat = k / n
    a, b, c = 1 + z * z / n, -(2 * phat + z * z / n), phat * phat
    root = math.sqrt(b * b - 4 * a * c)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (1, 2), (297, 450), (257, 450), (52, 450), (5, 7)])
def test_wilson_equals_the_hand_computation(k, n):
    low, high = wilson_interval(k, n)
    expected = _by_hand(k, n)
    assert low == pytest.approx(max(expected[0], 0.0), abs=1e-9)
    assert high == pytest.approx(min(expected[1], 1.0), abs=1e-9)
    assert 0 <= low <= k / n <= high <= 1
    for bound in (low, high):  # inverting the score test: |phat - p| / se(p) = z at each inner bound
        if 0 < bound < 1:
            assert abs(k / n - bound) / math.sqrt(bound * (1 - bound) / n) == pytest.approx(1.959963984540054)


def test_wilson_known_values_and_bad_input():
    # 0/10: (0, z^2/(n + z^2)) = (0, 0.27753...); 1/2 is symmetric about 1/2
    assert wilson_interval(0, 10) == (0.0, pytest.approx(3.841458820694124 / 13.841458820694124, abs=1e-12))
    low, high = wilson_interval(1, 2)
    assert low + high == pytest.approx(1.0, abs=1e-12)
    for args, message in [((3, 0), "`n` must be >= 1"), ((4, 3), r"`k` must be in \[0, n=3\]"),
                          ((-1, 3), "`k` must be in"), ((0.5, 3), "`k` must be an integer"),
                          ((True, 3), "`k` must be an integer")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            wilson_interval(*args)


def _evaluation(robust, eps=0.1, points="p"):
    robust = np.asarray(robust, bool)
    n = robust.size
    broken = [None if r else "fgsm" for r in robust]
    return Evaluation(1.0, float(robust.mean()), robust, broken, np.zeros((n, 2), "float32"), {}, 0, 0, 0.0,
                      [], eps, np.inf, ["fgsm"], "jax", (0.0, 1.0), points)  # fmt: skip


def test_compare_on_known_discordant_counts():
    # 30 points: 12 kept by both, 7 only by a, 2 only by b, 9 lost by both
    a = np.array([1] * 12 + [1] * 7 + [0] * 2 + [0] * 9, bool)
    b = np.array([1] * 12 + [0] * 7 + [1] * 2 + [0] * 9, bool)
    perm = np.random.default_rng(0).permutation(30)  # the order of the points does not matter
    c = gradkit.compare(_evaluation(a[perm]), _evaluation(b[perm]))
    assert (c.only_a, c.only_b, c.n_points) == (7, 2, 30)
    assert c.difference == pytest.approx(5 / 30) == pytest.approx(c.accuracy_a - c.accuracy_b)
    assert (c.accuracy_a, c.accuracy_b) == (pytest.approx(19 / 30), pytest.approx(14 / 30))
    # exact two-sided p: 2 * P(X <= 2), X ~ Binomial(9, 1/2) = 2 * (1 + 9 + 36) / 512
    assert c.p_value == pytest.approx(92 / 512, abs=1e-12)
    assert c.p_value == pytest.approx(binomtest(7, 9, 0.5).pvalue, abs=1e-12)
    swapped = gradkit.compare(_evaluation(b), _evaluation(a))
    assert (swapped.only_a, swapped.only_b, swapped.difference) == (2, 7, pytest.approx(-5 / 30))
    assert swapped.p_value == pytest.approx(c.p_value)
    same = gradkit.compare(_evaluation(a), _evaluation(a))
    assert (same.difference, same.p_value, same.only_a, same.only_b) == (0.0, 1.0, 0, 0)
    assert "McNemar exact p=0.18" in str(c)


@pytest.mark.parametrize("only_a,only_b", [(0, 5), (40, 22), (13, 13), (100, 0)])
def test_paired_comparison_matches_binomtest(only_a, only_b):
    both, neither = 17, 8
    a = np.array([1] * both + [1] * only_a + [0] * only_b + [0] * neither, bool)
    b = np.array([1] * both + [0] * only_a + [1] * only_b + [0] * neither, bool)
    c = paired_comparison(a, b)
    assert c.p_value == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue, abs=1e-12)
    assert (c.only_a, c.only_b) == (only_a, only_b)


def test_compare_refuses_other_points_eps_or_types():
    a = _evaluation([1, 0, 1, 1])
    with pytest.raises(ValueError, match="same points.*4 and 3 points"):
        gradkit.compare(a, _evaluation([1, 0, 1]))
    with pytest.raises(ValueError, match="same points.*SHA-256 differ"):
        gradkit.compare(a, _evaluation([1, 0, 1, 1], points="q"))
    with pytest.raises(ValueError, match="same eps and norm.*eps=0.1.*eps=0.2"):
        gradkit.compare(a, _evaluation([1, 0, 1, 1], eps=0.2))
    with pytest.raises(TypeError, match="`result_b` must be a gradkit.Evaluation"):
        gradkit.compare(a, [1, 0, 1, 1])
    with pytest.raises(ValueError, match="`correct_b` must be a non-empty 1-D array of booleans"):
        paired_comparison([True, False], [0.5, 1.0])
    with pytest.raises(ValueError, match="must describe the same points"):
        paired_comparison([True, False], [True])


def test_real_evaluations_carry_intervals_and_compare():
    """On every backend: `interval` is Wilson's on the evaluated points; `compare` pairs two models on the
    same points and refuses a result on other points of the same count."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (40, 6)).astype("float32")
    models = []
    for seed in (0, 1):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.set_weights(
            [np.random.default_rng(seed).normal(size=(6, 3)).astype("float32"), np.zeros(3, "float32")]
        )
        models.append(model)
    y = np.asarray(gradkit.attacks.decide(models[0], x))
    a, b = (
        gradkit.evaluate(m, x, y, eps=0.05, attacks=["fgsm"], clip_values=(0, 1), verbose=0) for m in models
    )
    assert a.interval == wilson_interval(int(a.robust.sum()), 40)
    assert a.interval[0] <= a.robust_accuracy <= a.interval[1]
    assert a.to_dict()["interval"] == list(a.interval) and "Wilson" in a.summary()
    c = gradkit.compare(a, b)
    assert c.difference == pytest.approx(a.robust_accuracy - b.robust_accuracy)
    assert c.only_a == int(np.sum(a.robust & ~b.robust)) and c.only_b == int(np.sum(b.robust & ~a.robust))
    other = gradkit.evaluate(
        models[1], x[::-1].copy(), y, eps=0.05, attacks=["fgsm"], clip_values=(0, 1), verbose=0
    )
    with pytest.raises(ValueError, match="SHA-256 differ"):
        gradkit.compare(a, other)
