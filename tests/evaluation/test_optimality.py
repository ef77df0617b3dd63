"""`gradkit.optimality` (`gradkit.evaluation._optimality`): AttackBench's score on distances made by hand."""

import numpy as np
import pytest

import gradkit

INF = np.inf
BEST = [1.0, 2.0, 3.0, 4.0]


def test_the_best_scores_one_and_an_attack_that_never_succeeds_zero():
    scores = gradkit.optimality({"best": BEST, "never": [INF] * 4, "same": np.array(BEST) + 0.0})
    assert scores == {"best": 1.0, "never": 0.0, "same": 1.0}


def test_a_case_by_hand():
    # eps* = 4 (the best curve reaches 0 there); areas on [0, 4]: best 1 + .75 + .5 + .25 = 2.5,
    # late = [2, 3, 4, inf]: 2 * 1 + .75 + .5 = 3.25; score (4 - 3.25) / (4 - 2.5) = 0.5
    scores = gradkit.optimality({"best": BEST, "late": [2.0, 3.0, 4.0, INF]})
    assert scores["late"] == pytest.approx(0.5, abs=1e-12) and scores["best"] == 1.0
    # neither is best everywhere: d* = min = [1, 2, 3, 4] again (A* = 2.5, eps* = 4); a = [1, 3, 3, 8]:
    # A = (1 + 3 + 3 + 4) / 4 = 2.75 -> 1.25 / 1.5; b = [2, 2, 4, 4]: A = 3 -> 1 / 1.5
    scores = gradkit.optimality({"a": [1.0, 3.0, 3.0, 8.0], "b": [2.0, 2.0, 4.0, 4.0]})
    assert scores["a"] == pytest.approx(1.25 / 1.5) and scores["b"] == pytest.approx(1 / 1.5)


def test_clean_marks_the_points_broken_without_perturbation():
    # point 0 is misclassified: rho = 3/4, and it counts as broken at 0 by every attack whatever its distance
    clean = np.array([False, True, True, True])
    scores = gradkit.optimality({"best": [INF, 2.0, 3.0, 4.0], "late": [9.0, 3.0, 4.0, INF]}, clean=clean)
    # eps* = 4; best area (0 + 2 + 3 + 4) / 4 = 2.25, late (0 + 3 + 4 + 4) / 4 = 2.75, rho * eps* = 3
    assert scores["best"] == 1.0 and scores["late"] == pytest.approx((3 - 2.75) / (3 - 2.25))
    assert gradkit.optimality({"never": [INF] * 4, "best": [0.0, 2.0, 3.0, 4.0]}, clean=clean)["never"] == 0.0


def test_the_trapezoid_integral_reproduces_attackbench_analysis_utils():
    # AttackBench's analysis/utils.py: best unique [1, 2, 3, 4], robust accuracy [.75, .5, .25, 0],
    # trapezoid 1.125; late clipped at 4: unique [2, 3, 4], accuracy [.75, .5, 0], trapezoid 0.875:
    # (4 - .875) / (4 - 1.125)
    scores = gradkit.optimality({"best": BEST, "late": [2.0, 3.0, 4.0, INF]}, integral="trapezoid")
    assert scores["best"] == 1.0 and scores["late"] == pytest.approx(3.125 / 2.875)  # above 1 under that rule


def test_no_finite_best_distance_or_no_spread_gives_nan():
    assert np.isnan(gradkit.optimality({"a": [INF, INF]})["a"])
    assert np.isnan(gradkit.optimality({"a": [2.0, 2.0], "b": [2.0, 3.0]})["b"])  # the best curve: a step


@pytest.mark.parametrize(
    "distances, clean, error, match",
    [
        ([1.0, 2.0], None, TypeError, "`distances` must be a non-empty dict"),
        ({}, None, TypeError, "`distances` must be a non-empty dict"),
        ({"a": [1.0, 2.0], "b": [1.0]}, None, ValueError, r"`distances\['b'\]` must be the same length"),
        ({"a": [1.0, -2.0]}, None, ValueError, r"`distances\['a'\]` must be distances >= 0"),
        ({"a": [1.0, np.nan]}, None, ValueError, "no NaN"),
        ({"a": [[1.0, 2.0]]}, None, ValueError, "1-D"),
        ({"a": ["x", 2.0]}, None, TypeError, "numbers"),
        ({"a": [1.0, 2.0]}, [1, 0], ValueError, "`clean` must be None or a bool array"),
        ({"a": [1.0, 2.0]}, np.ones(3, bool), ValueError, r"bool array \(2,\)"),
    ],
)
def test_bad_input_names_the_argument(distances, clean, error, match):
    with pytest.raises(error, match=match):
        gradkit.optimality(distances, clean=clean)


def test_an_unknown_integral_is_refused():
    with pytest.raises(ValueError, match="integral"):
        gradkit.optimality({"a": BEST}, integral="simpson")
