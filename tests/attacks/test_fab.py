"""FAB (`gradkit.attacks.fab`; Croce & Hein 2020): hand-computed steps on linear models, the box-constrained
projection against a per-row reference, the minimum-norm and eps contracts, ensembles and boosted models
judged by their vote, FAB-T, bad input."""

import sys

import keras
import numpy as np
import pytest

import gradkit
from gradkit import backend
from gradkit.attacks import decide, recording
from gradkit.attacks.fab import project

from conftest import BACKEND, set_weights_from

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


NORMS = [np.inf, 2, 1]


def fab_run(model, x, y, **kwargs):
    """`gradkit.fab` and what its record says: `(x_adv, norms, success, record)`."""
    with recording() as record:
        x_adv = gradkit.fab(model, x, y, **kwargs)
    return x_adv, record.norms, record.success, record


def lp(a, norm):
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    return np.linalg.norm(a, ord=norm, axis=1)


@pytest.fixture(scope="module")
def linear():
    """z_1 - z_0 = 2 x_0 - x_1 + 0.7: at (0.3, 1.0) and at (0.05, 0.5) it is 0.3 (class 1), and FAB's
    hyperplane for class 0 has normal w = (-2, 1) and offset f = z_0 - z_1 = -0.3."""
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.array([[0.0, 2.0], [0.0, -1.0]], "float32"), np.array([0.0, 0.7], "float32")])
    return model


# The smallest d with 2 d_0 - d_1 = -0.3 (worked by hand): Linf spreads it equally over the two
# coordinates (|d_i| = 0.3 / ||w||_1 = 0.1), L2 goes along w (0.3 w / ||w||^2), L1 uses only the
# coordinate of largest |w_i| (0.3 / 2).
UNBOXED = {np.inf: [-0.1, 0.1], 2: [-0.12, 0.06], 1: [-0.15, 0.0]}


@pytest.mark.parametrize("norm", NORMS)
def test_one_step_lands_on_the_hand_computed_minimal_perturbation(linear, norm):
    x = np.array([[0.3, 1.0]], "float32")
    x_adv, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=1)
    # at the first step the iterate is x0, both projections coincide, and the step is eta * d (eta 1.05)
    expected = x + 1.05 * np.array([UNBOXED[norm]], "float32")
    np.testing.assert_allclose(x_adv, expected, atol=1e-6)
    np.testing.assert_allclose(norms, 1.05 * lp([UNBOXED[norm]], norm), rtol=1e-5)
    assert success.all() and decide(linear, x_adv)[0] == 0
    # more steps: FAB's backward steps bring it to the boundary, from the adversarial side
    _, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=30)
    exact = lp([UNBOXED[norm]], norm)
    assert success.all() and exact[0] <= norms[0] <= 1.01 * exact[0]


@pytest.mark.parametrize("norm", NORMS)
def test_the_box_bounds_the_step_as_computed_by_hand(linear, norm):
    """At x0 = (0.05, 0.5) in [0, 1], coordinate 0 can only drop 0.05 (a decrease of 2 * 0.05 = 0.1 of
    w . x); the other 0.2 must come from coordinate 1: d = (-0.05, 0.2) in all three norms (Linf:
    lambda = 0.2; L2: e_0 = min(2 lambda, 0.05), e_1 = lambda = 0.2; L1: coordinate 0 first, full)."""
    x = np.array([[0.05, 0.5]], "float32")
    x_adv, norms, success, _ = fab_run(linear, x, [1], norm=norm, steps=1, clip_values=(0, 1))
    np.testing.assert_allclose(x_adv, [[0.0, 0.5 + 1.05 * 0.2]], atol=1e-6)  # x0 + 1.05 d, clipped
    assert success.all() and decide(linear, x_adv)[0] == 0


@pytest.fixture(scope="module")
def mlp():
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(16, activation="relu")(inp)
    return set_weights_from(keras.Model(inp, keras.layers.Dense(4)(hidden)), seed=0, scale=0.8)


@pytest.fixture(scope="module")
def points():
    return np.random.RandomState(1).uniform(0.2, 0.8, size=(24, 6)).astype("float32")


# per-sample norms of the first 6 points (10 steps, box [0, 1]), recorded on JAX; every backend must agree
GOLDEN = {
    np.inf: [0.147593, 0.063136, 0.245214, 0.007205, 0.135503, 0.095831],
    2: [0.239574, 0.095247, 0.36877, 0.010889, 0.219417, 0.144826],
    1: [0.261764, 0.103495, 0.400307, 0.012203, 0.2482, 0.162302],
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("targeted", [False, True])
def test_examples_are_adversarial_in_the_box_and_their_norms_are_returned(mlp, points, norm, targeted):
    model = mlp
    labels = decide(model, points)
    x_adv, norms, success, _ = fab_run(model, points, labels, norm=norm, steps=10, targeted=targeted,
                                       n_target_classes=3, clip_values=(0, 1))  # fmt: skip
    assert x_adv.dtype == np.float32 and x_adv.shape == points.shape
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert success.mean() > 0.8
    np.testing.assert_array_equal(decide(model, x_adv)[success] != labels[success], True)
    np.testing.assert_allclose(norms[success], lp(x_adv - points, norm)[success], rtol=1e-6)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    assert np.isinf(norms[~success]).all()


@pytest.mark.parametrize("norm", NORMS)
def test_eps_mode_keeps_the_examples_inside_the_ball(mlp, points, norm):
    model = mlp
    labels = decide(model, points)
    _, norms, _, _ = fab_run(model, points, labels, norm=norm, steps=10, clip_values=(0, 1))
    eps = float(np.median(norms))
    x_adv, _, success, _ = fab_run(model, points, labels, norm=norm, eps=eps, steps=10, clip_values=(0, 1))
    np.testing.assert_array_equal(success, norms <= eps)  # one run: the same iterates, judged at eps
    assert (lp(x_adv - points, norm) <= eps).all()
    np.testing.assert_array_equal(decide(model, x_adv)[success] != labels[success], True)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    np.testing.assert_array_equal(gradkit.fab(model, points, labels, norm=norm, eps=eps, steps=10,
                                              clip_values=(0, 1)), x_adv)  # fmt: skip


def test_misclassified_points_are_returned_clean_with_norm_zero(mlp, points):
    model = mlp
    labels = (decide(model, points) + 1) % 4
    x_adv, norms, success, _ = fab_run(model, points, labels, steps=10, clip_values=(0, 1))
    np.testing.assert_array_equal(x_adv, points)
    assert success.all() and (norms == 0).all()


def test_backends_agree_on_the_norms(mlp, points):
    model = mlp
    labels = decide(model, points)
    found = {}
    for norm in NORMS:
        found[norm] = fab_run(model, points, labels, norm=norm, steps=10, clip_values=(0, 1))[1][:6]
        print(BACKEND, norm, np.round(found[norm], 6).tolist())
        if GOLDEN[norm]:
            np.testing.assert_allclose(found[norm], GOLDEN[norm], rtol=2e-4)


@pytest.mark.parametrize("objective", ["loss_sum", "vote_margin"])
def test_an_ensemble_is_judged_by_its_weighted_vote(mlp, points, objective):
    other = set_weights_from(keras.models.clone_model(mlp), seed=1, scale=0.8)
    ensemble = gradkit.WeightedEnsemble([mlp, other], [0.3, 0.7])
    labels = decide(ensemble, points)
    x_adv, norms, success, _ = fab_run(ensemble, points, labels, norm=2, steps=10, clip_values=(0, 1),
                                       objective=objective)  # fmt: skip
    print(objective, success.mean())
    assert success.sum() >= 3  # FAB linearizes a smooth surrogate of the vote; success is the vote's
    np.testing.assert_array_equal(decide(ensemble, x_adv)[success] != labels[success], True)
    np.testing.assert_array_equal(x_adv[~success], points[~success])
    np.testing.assert_allclose(norms[success], lp(x_adv - points, 2)[success], rtol=1e-6)


def test_fab_t_runs_in_evaluate_on_the_points_still_robust(mlp, points):
    labels = decide(mlp, points)
    eps = 0.03
    first = gradkit.evaluate(mlp, points, labels, eps=eps, attacks=["apgd-ce"], steps=10, clip_values=(0, 1),
                             verbose=0)  # fmt: skip
    both = gradkit.evaluate(mlp, points, labels, eps=eps, attacks=["apgd-ce", "fab-t"], steps=10,
                            clip_values=(0, 1), verbose=0)  # fmt: skip
    record = both.per_attack["fab-t"]
    assert record["n_points"] == round(first.robust_accuracy * len(points))  # only the points left robust
    assert record["n_gradients"] == record["n_points"] * 3 * 10  # 3 targets (C - 1), 10 steps, 1 row each
    assert both.robust_accuracy <= first.robust_accuracy
    alone = gradkit.evaluate(mlp, points, labels, eps=eps, attacks="fab-t", steps=10, clip_values=(0, 1),
                             verbose=0)  # fmt: skip
    broken = np.asarray(alone.broken_by) == "fab-t"
    assert broken.sum() == alone.per_attack["fab-t"]["n_broken"] > 0
    assert (np.abs(alone.x_adv[broken] - points[broken]).max(axis=1) <= eps).all()
    np.testing.assert_array_equal(decide(mlp, alone.x_adv[broken]) != labels[broken], True)


def no_step(*args, **kwargs):
    pytest.fail("an attack step ran")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(norm=3), "`norm` must be np.inf"),
        (dict(norm=0), "`norm` must be np.inf"),
        (dict(eps=-0.1), "`eps` must be"),
        (dict(n_target_classes=0), "`n_target_classes` must be"),
        (dict(steps=0), "`steps` must be"),
        (dict(alpha_max=1.5), "`alpha_max` must be"),
        (dict(eta=0.0), "`eta` must be"),
        (dict(beta=-0.5), "`beta` must be"),
    ],
)
def test_bad_input_is_refused_before_any_step(mlp, points, monkeypatch, kwargs, message):
    monkeypatch.setattr(sys.modules["gradkit.attacks.fab"], "run", no_step)
    with pytest.raises(ValueError, match=message):
        gradkit.fab(mlp, points, **kwargs)


def test_fab_t_needs_three_classes(linear, monkeypatch):
    monkeypatch.setattr(sys.modules["gradkit.attacks.fab"], "run", no_step)
    x = np.array([[0.3, 1.0]], "float32")
    with pytest.raises(ValueError, match="FAB-T.*at least 3 classes"):
        gradkit.fab(linear, x, [1], targeted=True)
    with pytest.raises(ValueError, match="attacks.*fab-t"):
        gradkit.evaluate(linear, x, [1], eps=0.1, attacks=["fab-t"], verbose=0)


def test_a_boosted_model_is_attacked_through_its_ensemble_and_judged_by_its_vote(points):
    def learner():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(3)])  # fmt: skip
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss=LOGITS_CE)
        return model

    labels = (points[:, 0] + points[:, 1] > 1.0).astype(int) + (points[:, 2] > 0.6)
    est = gradkit.SAMME(learner, n_estimators=2, fit_kwargs={"epochs": 20, "verbose": 0}, random_state=0,
                        verbose=0).fit(points, labels)  # fmt: skip
    y = decide(est, points)
    x_adv, norms, success, _ = fab_run(est, points, y, norm=2, steps=10, clip_values=(0, 1))
    assert success.sum() >= 3
    np.testing.assert_array_equal(decide(est, x_adv)[success] != y[success], True)
    np.testing.assert_array_equal(est.predict(x_adv)[success] != y[success], True)
    np.testing.assert_allclose(norms[success], lp(x_adv - points, 2)[success], rtol=1e-6)


def test_more_targets_than_other_classes_means_all_of_them(mlp, points):
    labels = mlp.predict(points, verbose=0).argmax(axis=1)
    many = fab_run(mlp, points, labels, targeted=True, n_target_classes=9, steps=3, clip_values=(0, 1))
    three = fab_run(mlp, points, labels, targeted=True, n_target_classes=3, steps=3, clip_values=(0, 1))
    np.testing.assert_array_equal(many[1], three[1])  # as APGD-T: C - 1 targets at most


def _reference(t, w, c, norm, lo, hi):
    """The smallest `d` (Linf or L2) with `w . (t + d) = w . t - c` and `lo <= t + d <= hi`, row by row."""
    out = np.zeros_like(t, np.float64)
    for k in range(len(t)):
        sign = 1.0 if c[k] >= 0 else -1.0
        wk, ck = w[k].astype(np.float64) * sign, float(c[k]) * sign
        room = np.maximum(np.where(wk > 0, t[k] - lo, hi - t[k]), 0.0)
        aw = np.abs(wk)
        useful = aw > 0
        r = np.where(useful, room / (1.0 if norm == np.inf else np.where(useful, aw, 1.0)), np.inf)
        slope = aw if norm == np.inf else aw**2
        done, rate, lam = 0.0, slope[useful].sum(), 1e30
        for i in np.argsort(r, kind="stable"):
            if not useful[i]:
                break
            if rate > 0 and (ck - done) / rate <= r[i]:
                break
            done, rate = done + aw[i] * room[i], rate - slope[i]
        if rate > 1e-12:
            lam = (ck - done) / rate
        e = np.minimum(lam * (1.0 if norm == np.inf else aw), room)
        out[k] = np.where(useful, -np.sign(wk) * e, 0.0)
    return out


def _case(seed, scale):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 1, (64, 20)).astype("float32")
    t[:, :4], t[:, 4:8], t[:, 8:10] = 0.0, 1.0, 0.5  # at a bound, and ties
    w = rng.standard_normal((64, 20)).astype("float32")
    w[:, 10:12] = 0.0
    c = (scale * rng.standard_normal(64)).astype("float32")
    return t, w, c


@pytest.mark.parametrize("norm", [np.inf, 2.0])
@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0])  # mostly free, box-limited, mostly unreachable
def test_the_projection_matches_the_sorted_walk(norm, scale):
    t, w, c = _case(int(scale * 100), scale)
    lo, hi = backend.to_tensor(np.float32(0.0)), backend.to_tensor(np.float32(1.0))
    args = [backend.to_tensor(a) for a in (t, w, c)]
    d = backend.to_numpy(project(*args, norm, (lo, hi))).astype(np.float64)
    expected = _reference(t, w, c, norm, 0.0, 1.0)
    np.testing.assert_allclose(d, expected, rtol=1e-4, atol=1e-5)
    z = t + d
    assert z.min() >= -1e-6 and z.max() <= 1 + 1e-6
    # where the box holds enough room (moving every useful coordinate to its bound passes c), the
    # step lands on the hyperplane
    room = np.where(w * np.sign(c)[:, None] > 0, t, 1 - t)
    reachable = np.sum(np.abs(w) * room, axis=1) > 1.001 * np.abs(c)
    np.testing.assert_allclose(((w * d).sum(axis=1) + c)[reachable], 0.0, atol=1e-4)
    assert reachable.any()
