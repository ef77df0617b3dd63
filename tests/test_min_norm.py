"""Minimum-norm attacks (FMN, DDN) and `min_norm`: closed-form minimal perturbations of linear models,
adversarial outputs inside the box, the curve from one run, ensembles, bad input."""

import keras
import numpy as np
import pytest

import gradkit

D = 10
RNG = np.random.default_rng(0)
W = RNG.standard_normal((D, 2)).astype("float32")  # two classes: the closed forms below are exact
X = RNG.uniform(0.35, 0.65, (12, D)).astype("float32")
C = float(-np.median(X @ (W[:, 1] - W[:, 0])))  # the bias that puts the boundary among the points
DUAL = {2: 2, np.inf: 1, 1: np.inf}


def linear(weights=W):
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(weights.shape[1])])
    model.set_weights([weights, np.array([0.0, C], "float32")])
    return model


def labels_of(model, x):
    return keras.ops.convert_to_numpy(model(x)).argmax(1)


def labels(model):
    return labels_of(model, X)


class OddMargin(keras.layers.Layer):
    """Two-class logits [0, f(a)] with f(a) = a - 0.05 a|a|: the sign of a, curved so that the linear
    estimate of the distance to the boundary overshoots it (on an exactly linear model FMN lands ON
    the boundary, where float rounding decides; adv-lib and foolbox do the same)."""

    def call(self, a):
        return keras.ops.concatenate([keras.ops.zeros_like(a), a - 0.05 * a * keras.ops.abs(a)], axis=-1)


def curved(weights=W, sign=1.0):
    """A classifier deciding as `linear(weights)` (two classes: class 1 iff a = x @ (w_1 - w_0) + C > 0),
    so its minimal perturbations have the closed form of `exact`."""
    w = (weights[:, 1] - weights[:, 0])[:, None]
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(1), OddMargin()])
    model.set_weights([sign * w, np.array([sign * C], "float32")])
    return model


def exact(x, y, norm, weights=W):
    """Closed form for two classes: the smallest Lp perturbation that flips the decision is
    |z_1 - z_0| / ||w_1 - w_0||_dual (Hoelder; no box active: the points sit in the middle of [0, 1])."""
    w = weights[:, 1] - weights[:, 0]
    return np.abs(x @ w + C) / np.linalg.norm(w, ord=DUAL[norm])


def lp(a, norm):
    return np.linalg.norm(np.asarray(a, np.float64).reshape(len(a), -1), ord=norm, axis=1)


@pytest.mark.parametrize("norm", [2, np.inf, 1])
def test_fmn_reaches_the_closed_form_minimum_of_a_linear_model(norm):
    model = curved()
    y = labels(model)
    adv = gradkit.fmn(model, X, y, norm=norm, steps=100, clip_values=(0, 1))
    assert adv.dtype == np.float32 and adv.shape == X.shape
    assert (adv >= 0).all() and (adv <= 1).all()
    assert (labels_of(model, adv) != y).all()
    np.testing.assert_allclose(lp(adv - X, norm), exact(X, y, norm), rtol=0.01)


def test_ddn_reaches_the_closed_form_l2_minimum():
    model = curved()
    y = labels(model)
    adv = gradkit.ddn(model, X, y, steps=100, clip_values=(0, 1))
    assert (labels_of(model, adv) != y).all() and (adv >= 0).all() and (adv <= 1).all()
    ratio = lp(adv - X, 2) / exact(X, y, 2)  # eps moves by a factor 1 +- gamma (0.05) per step
    assert (ratio >= 1 - 1e-5).all() and (ratio <= 1.06).all() and np.median(ratio) < 1.01


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


@pytest.mark.parametrize("norm", [2, np.inf, 1])
def test_fab_in_min_norm_reaches_the_closed_form_and_the_minimum_is_kept(norm):
    model = curved()
    y = labels(model)
    fab = gradkit.min_norm(model, X, y, norm=norm, attacks="fab", steps=30, clip_values=(0, 1))
    np.testing.assert_allclose(fab.norms, exact(X, y, norm), rtol=0.01)
    both = gradkit.min_norm(model, X, y, norm=norm, attacks=("fmn", "fab"), steps=30, clip_values=(0, 1))
    assert np.all(both.norms <= fab.norms) and set(both.best_attack) <= {"fmn", "fab"}
    np.testing.assert_allclose(lp(both.x_adv - X, norm), both.norms, rtol=1e-5)


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


def test_study_fmn_and_fab_break_each_point_at_its_norm():
    from gradkit.study import Dataset, StudyConfig, _attack, _outdir
    from gradkit.study._attack import WORST

    model = curved()
    y = labels(model)
    data = Dataset("toy", X, y, X, y, 2)
    config = StudyConfig.from_options(attacks=["fmn"], epsilons=[0, 0.02, 0.05], apgd_steps=30)
    record = _attack.new_record(labels_of(model, X) == y, config.attacks)
    accuracy = {}
    for eps in config.epsilons:
        rows, _ = _attack.attack_at(model, "m", data, eps, record, config, None)
        accuracy[eps] = {r["attack"]: r["accuracy"] for r in rows}
    norms = np.array([np.inf if v is None else v for v in record["min_norm"]["fmn"]])
    np.testing.assert_allclose(norms, exact(X, y, np.inf), rtol=0.01)
    for eps in config.epsilons:
        assert accuracy[eps] == {"worst_case": np.mean(norms > eps), "fmn": np.mean(norms > eps)}
    samples = _outdir.sample_rows({"samples": {"m": record}}, y)
    assert [r["m_fmn_norm"] for r in samples] == record["min_norm"]["fmn"]
    assert _attack.work(config, 0.02) == 15.0  # one run of 30 steps over the two eps > 0
    fab = StudyConfig.from_options(attacks=["fab"], epsilons=[0, 0.02, 0.05], apgd_steps=30)
    record = _attack.new_record(labels_of(model, X) == y, fab.attacks)
    found = {eps: _attack.attack_at(model, "m", data, eps, record, fab, None)[0] for eps in fab.epsilons}
    fab_norms = np.array([np.inf if v is None else v for v in record["min_norm"]["fab"]])
    np.testing.assert_allclose(fab_norms, exact(X, y, np.inf), rtol=0.01)
    for eps, rows in found.items():
        assert {r["attack"]: r["accuracy"] for r in rows} == {
            a: np.mean(fab_norms > eps) for a in (WORST, "fab")
        }
    samples = _outdir.sample_rows({"samples": {"m": record}}, y)
    assert [r["m_fab_norm"] for r in samples] == record["min_norm"]["fab"]
