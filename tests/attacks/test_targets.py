"""APGD-T's targets (`gradkit.attacks._targets`): by logit (AutoAttack) or by MALT's linearized distance
(Melamed, Yehudai & Shamir 2024), against closed forms on linear models."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.attacks import _targets
from gradkit.attacks._frame import Frame


def linear(kernel, bias):
    """`z = x @ kernel + bias`: a linear classifier of logits."""
    kernel, bias = np.asarray(kernel, "float32"), np.asarray(bias, "float32")
    model = keras.Sequential([keras.Input((kernel.shape[0],)), keras.layers.Dense(kernel.shape[1])])
    model.set_weights([kernel, bias])
    return model


# Class 0 wins at every point below (20 features near 0.5); the runner-up class 1 is 0.1 behind with a
# gradient difference of L1 norm 0.1 (Linf distance 1.0, out of reach), the third class about 0.5 behind
# with one of L1 norm 4 (Linf distance about 0.125), along all 20 features (a random start on the eps
# sphere does not reach it): AutoAttack's logit order targets the far class 1, MALT the near class 2.
D, EPS = 20, 0.2
FAR_RUNNER_UP = linear(
    np.stack([np.zeros(D), 0.1 * np.eye(D)[0], np.full(D, 0.2)], axis=1), [1.0, 0.85, -1.5]
)
POINTS = np.random.default_rng(0).uniform(0.45, 0.55, (6, D)).astype("float32")


def test_logit_ranked_apgd_t_misses_the_near_boundary_and_malt_finds_it():
    x, y = POINTS, np.zeros(len(POINTS), int)
    z = FAR_RUNNER_UP.predict(x, verbose=0)
    assert np.all(np.argsort(-z, axis=1) == [0, 1, 2])  # the runner-up by logit is class 1
    assert np.all((z[:, 0] - z[:, 2]) / 4.0 < EPS) and np.all((z[:, 0] - z[:, 1]) / 0.1 > 3 * EPS)
    options = dict(eps=EPS, loss="ce", targeted=True, n_target_classes=1, steps=10, seed=0)
    with gradkit.attacks.recording() as logits:
        gradkit.apgd(FAR_RUNNER_UP, x, y, **options)
    with gradkit.attacks.recording() as malt:
        adv = gradkit.apgd(FAR_RUNNER_UP, x, y, target_selection="malt", **options)
    assert not logits.success.any()  # class 1's boundary is at Linf distance 1.0 > eps
    assert malt.success.all()  # class 2's at about 0.125 < eps
    np.testing.assert_array_equal(FAR_RUNNER_UP.predict(adv, verbose=0).argmax(axis=1), 2)
    assert np.abs(adv - x).max() <= EPS + 1e-6
    assert logits.n_gradients == len(x) * 11  # the start and 10 steps, never broken


@pytest.mark.parametrize("norm, dual", [(np.inf, 1), (2.0, 2), (1.0, np.inf)])
def test_malt_score_is_the_distance_to_the_linear_boundary(norm, dual):
    """d_j = |z_y - z_j| / ||w_y - w_j||_q on a linear model (the closed form: its exact Lp distance to
    the boundary of y and j); a class with the label's own weights has no boundary and scores inf."""
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(6, 5)), rng.normal(size=5)
    b[0] += 4.0  # class 0 wins at every point
    w[:, 4], b[4] = w[:, 0], b[0] - 1.0  # class 4: parallel to class 0, never reached linearly
    model = linear(w, b)
    x = rng.uniform(0, 1, (7, 6)).astype("float32")
    y = np.zeros(7, int)
    w, b = np.float64(model.get_weights()[0]), np.float64(model.get_weights()[1])
    frame = Frame(model, x, y, loss="ce", targeted=True, single_input="APGD")
    candidates = np.tile(np.arange(1, 5), (7, 1))
    scores = _targets.scores(frame, candidates, norm)
    z = x @ w + b
    assert np.all(z.argmax(axis=1) == y)
    expected = np.abs(z[:, :1] - z[:, 1:4]) / np.linalg.norm((w[:, :1] - w[:, 1:4]).T, ord=dual, axis=1)
    np.testing.assert_allclose(scores[:, :3], expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.isinf(scores[:, 3])) and frame.n_gradients == 7 * 4
    ranks = _targets.ranked(frame, 3, "malt", norm)
    order = np.argsort(expected, axis=1, kind="stable") + 1
    np.testing.assert_array_equal(np.stack(ranks, axis=1), order)  # nearest first; class 4 last, cut


def test_logit_ranking_is_autoattacks_and_bad_selections_fail_before_any_work():
    x, y = POINTS, np.zeros(len(POINTS), int)
    frame = Frame(FAR_RUNNER_UP, x, y, loss="ce", targeted=True, single_input="APGD")
    assert [list(t) for t in _targets.ranked(frame, 5, "logits", np.inf)] == [[1] * 6, [2] * 6]  # capped
    with pytest.raises(ValueError, match="`target_selection` must be one of 'logits', 'malt'. Received: "):
        gradkit.apgd(FAR_RUNNER_UP, x, y, eps=0.1, targeted=True, target_selection="nearest")
    with pytest.raises(ValueError, match="`target_selection` must be 'logits' unless targeted=True"):
        gradkit.apgd(FAR_RUNNER_UP, x, y, eps=0.1, target_selection="malt")
