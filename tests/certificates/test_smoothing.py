"""Randomized smoothing (`certificates.smoothing`): the Clopper-Pearson ceiling alpha^(1/n), the radius
of a linear classifier against its exact L2 distance to the hyperplane, hand counts and their
abstentions, seeding, the hard vote of ensembles and boosted models as base classifier, argument checks."""

import math

import keras
import numpy as np
import pytest
from scipy import stats

import gradkit
from gradkit.certificates import smoothing
from helpers import models

from conftest import set_weights_from

SIGMA = 0.5


def constant(logits):
    """A two-feature model whose logits are `logits` whatever the input (a fixed decision under noise)."""
    return models.linear(np.zeros((2, len(logits))), logits) if len(logits) == 2 else _wide(logits)


def _wide(logits):
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(len(logits))(inp))
    model.set_weights([np.zeros((2, len(logits)), "float32"), np.asarray(logits, "float32")])
    return model


def binomial_p_value(k, n):
    """Two-sided exact binomial p-value at p = 1/2 by hand: the probability of outcomes no likelier than k."""
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    return min(1.0, sum(p for p in pmf if p <= pmf[k] * (1 + 1e-7)))


def clopper_pearson_lower(k, n, alpha):
    """The p with P(Binomial(n, p) >= k) = alpha, by bisection on the binomial tail (no scipy)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        tail = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(k, n + 1))
        lo, hi = (mid, hi) if tail < alpha else (lo, mid)
    return (lo + hi) / 2


def test_all_samples_on_the_top_class_give_alpha_to_the_one_over_n():
    n, alpha = 100_000, 0.001
    s = gradkit.smooth(constant([0.0, 1.0]), SIGMA, batch_size=25_000, seed=0, verbose=0)
    classes, radii = s.certify(np.zeros((2, 2), "float32"), n0=10, n=n, alpha=alpha)
    ceiling = SIGMA * stats.norm.ppf(alpha ** (1 / n))
    np.testing.assert_array_equal(classes, [1, 1])
    np.testing.assert_allclose(radii, ceiling, rtol=1e-9)
    assert abs(ceiling / SIGMA - 3.8115) < 5e-5
    # no count certifies more: the bound grows with n_A, and n_A = n gives alpha^(1/n)
    n_a = np.arange(0, n + 1, 997)
    selection = np.tile([0, 1], (len(n_a), 1))
    _, every = smoothing.certify_from_counts(selection, np.c_[n - n_a, n_a], alpha, SIGMA)
    assert every.max() <= ceiling * (1 + 1e-12) and np.all(np.diff(every) >= 0)
    assert smoothing.lower_confidence_bound(n, n, alpha) == pytest.approx(alpha ** (1 / n), rel=1e-12)


def test_linear_radius_tends_to_the_exact_l2_distance():
    # class 1 iff x0 + x1 > 0.5: the distance to the hyperplane is |x0 + x1 - 0.5| / sqrt(2)
    model = models.linear([[0.0, 1.0], [0.0, 1.0]], [0.5, 0.0])
    x = np.array([[0.5, 0.2], [0.0, -0.1], [0.8, 0.7], [0.1, 0.2]], "float32")
    distance = np.abs(x.sum(axis=1) - 0.5) / np.sqrt(2)
    truth = (x.sum(axis=1) > 0.5).astype(int)
    alpha, radii = 0.001, {}
    for n in (500, 20_000):
        classes, radii[n] = gradkit.smooth(model, SIGMA, seed=1, verbose=0).certify(x, 100, n, alpha)
        np.testing.assert_array_equal(classes, truth)
        assert np.all(radii[n] < distance)  # sound (fails with probability <= alpha per point)
        # the radius at the true p_A = Phi(d / sigma), within 5 binomial standard deviations of n_A
        p_a = stats.norm.cdf(distance / SIGMA)
        spread = 5 * np.sqrt(n * p_a * (1 - p_a))
        low, high = (
            SIGMA
            * stats.norm.ppf(smoothing.lower_confidence_bound(np.clip(n * p_a + s * spread, 0, n), n, alpha))
            for s in (-1, 1)
        )
        assert np.all(low <= radii[n]) and np.all(radii[n] <= high)
    assert np.all(distance - radii[20_000] < distance - radii[500])
    assert np.all(distance - radii[20_000] < 0.06)  # Phi^-1 of the bound's gap at n = 20000, sigma 0.5
    adv = gradkit.ddn(model, x, truth, steps=100)
    ddn = np.linalg.norm(adv - x, axis=1)
    np.testing.assert_allclose(ddn, distance, rtol=0.02)
    assert np.all(radii[20_000] < ddn)


def test_hand_counts_give_hand_abstentions(monkeypatch):
    counts = np.array([[60, 40, 0], [70, 30, 0], [50, 50, 0], [0, 3, 97], [0, 0, 1]])
    alpha = 0.05
    p = [binomial_p_value(60, 100), binomial_p_value(70, 100), 1.0, binomial_p_value(97, 100), 1.0]
    assert p[0] > alpha and p[1] < alpha and p[3] < alpha  # 0.057, 7.9e-5, 1.0, 1.3e-25, 1.0 by hand
    expected = [-1, 0, -1, 2, -1]
    np.testing.assert_array_equal(smoothing.predict_from_counts(counts, alpha), expected)
    s = gradkit.smooth(constant([0.0, 0.0, 0.0]), SIGMA, seed=0, verbose=0)
    monkeypatch.setattr(smoothing.SmoothedClassifier, "counts", lambda self, x, n, **kw: counts)
    np.testing.assert_array_equal(s.predict(np.zeros((5, 2), "float32"), n=100, alpha=alpha), expected)
    # certify: the selection's top class, bounded from the estimation counts
    selection = np.array([[9, 1, 0], [0, 10, 0], [1, 2, 7], [5, 5, 0]])
    estimation = np.array([[90, 10, 0], [60, 40, 0], [0, 0, 100], [52, 48, 0]])
    classes, radii = smoothing.certify_from_counts(selection, estimation, alpha, SIGMA)
    bound = clopper_pearson_lower(90, 100, alpha)
    np.testing.assert_array_equal(classes, [0, -1, 2, -1])  # row 1: class 1 has 40/100; row 3: 52/100
    np.testing.assert_allclose(
        radii, [SIGMA * stats.norm.ppf(bound), 0, SIGMA * stats.norm.ppf(alpha**0.01), 0], rtol=1e-6
    )


def test_same_seed_same_result_and_fresh_noise_without_seed():
    model = models.linear([[0.0, 1.0], [0.0, 1.0]], [0.5, 0.0])
    x = np.array([[0.3, 0.2], [0.4, 0.3]], "float32")  # near the boundary: counts vary with the noise
    first = gradkit.smooth(model, SIGMA, batch_size=64, seed=7, verbose=0)
    a, b = first.counts(x, 300), gradkit.smooth(model, SIGMA, batch_size=64, seed=7, verbose=0).counts(x, 300)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a.sum(axis=1), [300, 300])
    np.testing.assert_array_equal(first.certify(x, 20, 300)[1], first.certify(x, 20, 300)[1])
    other = gradkit.smooth(model, SIGMA, batch_size=64, seed=8, verbose=0).counts(x, 300)
    assert not np.array_equal(a, other)


def _vote_members():
    """Hard vote class 1 (two light members), soft average class 0 (one sure member)."""
    return [constant([5.0, 0.0]), constant([0.0, 0.1]), constant([0.0, 0.1])]


def test_ensemble_and_boosted_bases_use_the_hard_vote():
    x = np.zeros((3, 2), "float32")
    ensemble = gradkit.WeightedEnsemble(_vote_members(), [1.0, 0.6, 0.6])
    np.testing.assert_array_equal(ensemble.predict(x, voting="soft"), [0, 0, 0])
    np.testing.assert_array_equal(ensemble.predict(x), [1, 1, 1])
    boosted = gradkit.AdaBoostM1(lambda: None)
    boosted.estimators_, boosted.estimator_weights_ = _vote_members(), np.array([1.0, 0.6, 0.6])
    boosted.classes_, boosted.n_classes_ = np.array([0, 1]), 2
    for base in (ensemble, boosted):
        s = gradkit.smooth(base, SIGMA, seed=0, verbose=0)
        np.testing.assert_array_equal(s.counts(x, 50), [[0, 50]] * 3)
        np.testing.assert_array_equal(s.predict(x, n=50), [1, 1, 1])


def test_tiny_noise_returns_the_vote_of_random_networks():
    members = []
    for seed in (1, 2, 3):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, "tanh"), keras.layers.Dense(3)])
        members.append(set_weights_from(model, seed=seed))
    x = np.random.RandomState(0).rand(8, 4).astype("float32")
    ensemble = gradkit.WeightedEnsemble(members, [0.5, 0.3, 0.4])
    classes = gradkit.smooth(ensemble, 1e-5, batch_size=16, seed=0, verbose=0).predict(x, n=20)
    np.testing.assert_array_equal(classes, ensemble.predict(x))
    single = gradkit.smooth(members[0], 1e-5, batch_size=16, seed=0, verbose=0).predict(x, n=20)
    np.testing.assert_array_equal(single, members[0].predict(x, verbose=0).argmax(axis=1))


def test_a_one_unit_logit_is_class_one_above_zero():
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(1)(inp))
    model.set_weights([np.array([[1.0], [0.0]], "float32"), np.zeros(1, "float32")])
    model.compile(loss=keras.losses.BinaryCrossentropy(from_logits=True))
    x = np.array([[2.0, 0.0], [-2.0, 0.0]], "float32")
    classes, radii = gradkit.smooth(model, SIGMA, seed=0, verbose=0).certify(x, 50, 2000)
    np.testing.assert_array_equal(classes, [1, 0])
    assert np.all((radii > 1.0) & (radii < 2.0))


def test_progress_bar_follows_verbose(capsys):
    x = np.zeros((1, 2), "float32")
    gradkit.smooth(constant([0.0, 1.0]), SIGMA, seed=0).certify(x, 10, 100)
    assert "certify: estimation" in capsys.readouterr().err
    gradkit.smooth(constant([0.0, 1.0]), SIGMA, seed=0, verbose=0).certify(x, 10, 100)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("kwargs", "call", "error", "name"),
    [
        (dict(sigma=0.0), None, ValueError, "sigma"),
        (dict(sigma="1"), None, TypeError, "sigma"),
        (dict(batch_size=0), None, ValueError, "batch_size"),
        (dict(seed=-1), None, ValueError, "seed"),
        ({}, dict(n=0), ValueError, "n"),
        ({}, dict(n0=0), ValueError, "n0"),
        ({}, dict(alpha=1.0), ValueError, "alpha"),
        ({}, dict(alpha=0), ValueError, "alpha"),
        ({}, dict(x=np.zeros((2, 3), "float32")), ValueError, "x"),
        ({}, dict(x=[np.zeros((2, 2), "float32")]), TypeError, "x"),
    ],
)
def test_bad_arguments_name_themselves_before_any_work(monkeypatch, kwargs, call, error, name):
    monkeypatch.setattr(smoothing.SmoothedClassifier, "counts", lambda *a, **k: pytest.fail("sampled"))
    options = dict(sigma=SIGMA, verbose=0) | kwargs
    with pytest.raises(error, match=f"`{name}`"):
        s = gradkit.smooth(constant([0.0, 1.0]), **options)
        call = dict(x=np.zeros((2, 2), "float32")) | (call or {})
        s.certify(call.pop("x"), **call)
    with pytest.raises(TypeError, match="`model`"):
        gradkit.smooth("not a model", SIGMA)


def test_a_model_that_is_not_a_classifier_is_refused_before_sampling(monkeypatch):
    inp = keras.Input((4, 2))
    spatial = keras.Model(inp, keras.layers.Dense(3)(inp))  # (n, 4, 3): no class per row
    s = gradkit.smooth(spatial, SIGMA, verbose=0)
    monkeypatch.setattr(keras.random, "normal", lambda *a, **k: pytest.fail("sampled"))
    with pytest.raises(ValueError, match="`model` must be a classifier"):
        s.predict(np.zeros((2, 4, 2), "float32"), n=10)
