"""The minimum-norm attacks FMN (`gradkit.attacks.fmn`) and, where a test covers both, DDN: the closed-form
minimal perturbations of two-class linear models (`oracles.linear`), L0, targeted attacks, ensembles judged
by their vote, recorded values on every backend, starting points, bad input."""

import numpy as np
import pytest

import gradkit
from oracles.linear import C, D, W, X, curved, exact, labels, labels_of, linear, lp


@pytest.mark.parametrize("norm", [2, np.inf, 1])
def test_fmn_reaches_the_closed_form_minimum_of_a_linear_model(norm):
    model = curved()
    y = labels(model)
    adv = gradkit.fmn(model, X, y, norm=norm, steps=100, clip_values=(0, 1))
    assert adv.dtype == np.float32 and adv.shape == X.shape
    assert (adv >= 0).all() and (adv <= 1).all()
    assert (labels_of(model, adv) != y).all()
    np.testing.assert_allclose(lp(adv - X, norm), exact(X, y, norm), rtol=0.01)


def test_fmn_l0_changes_few_coordinates_and_fools():
    model = curved()
    y = labels(model)
    adv = gradkit.fmn(model, X, y, norm=0, steps=100, clip_values=(0, 1))
    assert (labels_of(model, adv) != y).all()
    assert (np.count_nonzero(adv - X, axis=1) <= 5).all()


@pytest.mark.parametrize("attack", ["fmn", "ddn"])
def test_targeted_reaches_the_target_at_the_closed_form_norm(attack):
    model = curved()
    target = 1 - labels(model)
    norm = {"norm": 2} if attack == "fmn" else {}
    adv = getattr(gradkit, attack)(model, X, target, targeted=True, steps=100, clip_values=(0, 1), **norm)
    assert (labels_of(model, adv) == target).all()
    np.testing.assert_allclose(lp(adv - X, 2), exact(X, target, 2), rtol=0.06)


def test_no_success_returns_the_clean_input_and_inf():
    model = curved(np.zeros((D, 2), "float32"))  # a constant decision, never fooled
    y = labels(model)
    adv = gradkit.fmn(model, X, y, norm=2, steps=5, clip_values=(0, 1))
    np.testing.assert_array_equal(adv, X)
    result = gradkit.min_norm(model, X, y, norm=np.inf, steps=5, clip_values=(0, 1))
    assert np.isinf(result.norms).all() and result.accuracy_at(10.0) == 1.0


def test_ensemble_success_is_the_weighted_vote():
    heavy, light = curved(), curved(sign=-1.0)  # the light member always disagrees with the heavy one
    ensemble = gradkit.WeightedEnsemble([heavy, light], [0.7, 0.3])
    y = labels(heavy)
    adv = gradkit.fmn(ensemble, X, y, norm=2, steps=100, clip_values=(0, 1))
    assert (ensemble.predict(adv) != y).all()
    np.testing.assert_allclose(lp(adv - X, 2), exact(X, y, 2), rtol=0.01)  # the heavy member flips


RECORDED_LINF = [0.06032142, 0.03163624, 0.00943404, 0.01028475]  # JAX, 30 steps


def test_results_agree_with_the_recorded_values_on_every_backend():
    model = curved()
    y = labels(model)
    got = lp(gradkit.fmn(model, X[:4], y[:4], norm=np.inf, steps=30, clip_values=(0, 1)) - X[:4], np.inf)
    np.testing.assert_allclose(got, RECORDED_LINF, rtol=1e-4)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m: gradkit.fmn(m, X, norm=3), ValueError, "`norm` must be np.inf"),
        (lambda m: gradkit.fmn(m, X, eps=0.1), TypeError, "takes no `eps`.*min_norm"),
        (lambda m: gradkit.ddn(m, X, eps=0.1), TypeError, "takes no `eps`"),
        (lambda m: gradkit.ddn(m, X, norm=1), ValueError, "`norm` must be 2 \\(or \"l2\"\\) for DDN"),
        (lambda m: gradkit.fmn(m, X, steps=0), ValueError, "`steps` must be"),
        (lambda m: gradkit.fmn(m, X, gamma_init=2.0), ValueError, "`gamma_init`"),
        (lambda m: gradkit.fmn(m, X, targeted=True), ValueError, "target classes"),
        (lambda m: gradkit.fmn(m, X * 3, clip_values=(0, 1)), ValueError, "inside clip_values"),
        (lambda m: gradkit.fmn(m, X, starting_points=X), ValueError, "all be adversarial"),
        (lambda m: gradkit.min_norm(m, X, None, norm=2), ValueError, "`y`"),
        (lambda m: gradkit.min_norm(m, X, [0] * 12, norm=2, eps=0.1), TypeError, "no `eps`"),
        (lambda m: gradkit.min_norm(m, X, [0] * 12, norm=0, attacks=("ddn",)), ValueError, "for DDN"),
        (lambda m: gradkit.min_norm(m, X, [0] * 12, norm=5), ValueError, "`norm` must be np.inf"),
        (lambda m: gradkit.min_norm(m, X, [0] * 12, norm=2, attacks=("cw",)), ValueError, "`attacks`"),
        (lambda m: gradkit.min_norm(m, X, [0] * 12, norm=2, targeted=True), ValueError, "untargeted"),
        (lambda m: gradkit.robustness_curve(m, X, [0] * 12, attack="ddn", epsilons=[1], norm=np.inf),
         ValueError, "for DDN"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_any_work(call, error, match):
    with pytest.raises(error, match=match):
        call(linear())


def test_fmn_from_starting_points_reaches_the_minimum():
    model = curved()
    y = labels(model)
    w = W[:, 1] - W[:, 0]
    a = X @ w + C  # the mirror image of each point across the boundary: adversarial and in [0, 1]
    start = (X - 2 * (a / (w @ w))[:, None] * w).astype("float32")
    assert (labels_of(model, start) != y).all()
    adv = gradkit.fmn(model, X, y, norm=2, steps=50, starting_points=start, clip_values=(-1, 2))
    assert (labels_of(model, adv) != y).all()
    np.testing.assert_allclose(lp(adv - X, 2), exact(X, y, 2), rtol=0.01)
