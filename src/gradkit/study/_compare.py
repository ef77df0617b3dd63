"""The study's paired comparisons: two models on the same test points, per eps, by McNemar's exact test.

Every model is evaluated on the same test points, so the right test of "model a is more robust than b at
eps" is paired: only the points one keeps and the other loses count (`gradkit.evaluation.paired_comparison`).
The study compares, on the per-sample worst case, each model with the baseline it improves on (`PAIRS`).
Pure arithmetic on the per-sample records: no attack runs.

References:
    McNemar (1947), "Note on the sampling error of the difference between correlated proportions or
    percentages", Psychometrika 12(2), https://doi.org/10.1007/BF02295996
"""

import numpy as np

from gradkit.evaluation import paired_comparison

WORST = "worst_case"
PAIRS = (  # (a, b): a's method against the baseline it should beat
    ("adv_boost", "adv_single"),
    ("adv_boost", "single"),
    ("adaboost_m1", "single"),
    ("adv_single", "single"),
)
TEST = "McNemar's exact test (two-sided)"


def _correct(record, eps):
    """bool `(n,)`: the points no attack broke at `eps` or below (the per-sample worst case)."""
    return np.array([b is None or b > eps for b in record["broken"][WORST]], bool)


def comparisons(samples, epsilons):
    """The comparisons of `PAIRS` at every eps, for the pairs whose two models both have records.

    Args:
        samples: results.json's "samples" ({model: {"clean", "broken", "by"}}).
        epsilons: the study's epsilons.

    Returns:
        list of dicts {"a", "b", "attack" ("worst_case"), "eps", "n_points", "accuracy_a", "accuracy_b",
        "difference" (accuracy_a - accuracy_b), "only_a", "only_b", "p_value"}.
    """
    rows = []
    for a, b in PAIRS:
        if a not in samples or b not in samples:
            continue
        for eps in epsilons:
            c = paired_comparison(_correct(samples[a], eps), _correct(samples[b], eps))
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "attack": WORST,
                    "eps": eps,
                    "n_points": c.n_points,
                    "accuracy_a": c.accuracy_a,
                    "accuracy_b": c.accuracy_b,
                    "difference": c.difference,
                    "only_a": c.only_a,
                    "only_b": c.only_b,
                    "p_value": c.p_value,
                }
            )
    return rows
