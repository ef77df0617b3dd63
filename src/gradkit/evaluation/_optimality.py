"""AttackBench's optimality score: how close each attack's robust-accuracy curve comes to the best one.

Given per-sample distances `d_a` of attacks `a` (the smallest perturbation each found, inf where it
failed), the best attack a* is the per-sample minimum `d* = min_a d_a`, and eps* the largest finite
`d*`: where the best curve reaches its lowest point. With the robust accuracy `RA_a(eps)`, the share of
the n points classified correctly clean whose `d_a > eps`, and rho the clean accuracy, AttackBench's
local optimality (Cina et al. 2025, Eq. 4-5) is

    LO(a) = (rho * eps* - A_a) / (rho * eps* - A*),   A_a = int_0^eps* RA_a(eps) d eps,

1 for an attack as good as the best on every point, 0 for one that never succeeds (its curve stays at
rho). The integral of the step curve is exact: `A_a = mean_i(clean_i * min(d_a,i, eps*))`.
`integral="trapezoid"` instead integrates as AttackBench's `analysis/utils.py::eval_optimality` does
(the trapezoidal rule between the unique distances, the attack's distances clipped at eps*), to compare
with its published tables: that rule starts each curve at its smallest distance, so an attack that
never succeeds scores above 0 there.
"""

import numpy as np

from gradkit import _checks

INTEGRALS = ("steps", "trapezoid")


def _check(distances, clean):
    """`(names, D float64 (k, n), clean bool (n,))`, checked before any work."""
    if not isinstance(distances, dict) or not distances:
        _checks.fail(
            "distances", "a non-empty dict {attack name: per-sample distances (n,)}", distances, TypeError
        )
    rows = []
    for name, d in distances.items():
        try:
            d = np.asarray(d, dtype=np.float64)
        except (TypeError, ValueError):
            _checks.fail(f"distances[{name!r}]", "numbers (inf where the attack failed)", d, TypeError)
        if d.ndim != 1 or not len(d):
            _checks.fail(f"distances[{name!r}]", "a non-empty 1-D array (n,)", f"shape {d.shape}")
        if np.isnan(d).any() or (d < 0).any():
            _checks.fail(f"distances[{name!r}]", "distances >= 0 (inf where the attack failed), no NaN", d)
        if rows and len(d) != len(rows[0]):
            _checks.fail(f"distances[{name!r}]", f"the same length as the others ({len(rows[0])})", len(d))
        rows.append(d)
    n = len(rows[0])
    if clean is None:
        clean = np.ones(n, bool)
    else:
        given = np.asarray(clean)
        if given.dtype != bool or given.shape != (n,):
            _checks.fail(
                "clean", f"None or a bool array ({n},)", f"{given.dtype} array of shape {given.shape}"
            )
        clean = given
    return list(distances), np.stack(rows), clean


def _area_trapezoid(d, reference):
    """AttackBench's trapezoid area of the curve of `d` (misclassified points at 0), clipped at the
    largest `reference` distance."""
    values, counts = np.unique(np.minimum(d, reference.max()), return_counts=True)
    accuracy = 1.0 - np.cumsum(counts) / len(d)
    return float(np.trapezoid(accuracy, values))


def optimality(distances, clean=None, *, integral="steps"):
    """AttackBench's optimality score of each attack against the per-sample best of all of them.

    Args:
        distances: dict {attack name: float `(n,)`}, each point's smallest adversarial perturbation
            found by that attack (any norm, the same for all), `np.inf` where it failed; the same n
            points in every array. A budget attack gives them through an eps-bisection.
        clean: None (default: every point correctly classified) or bool `(n,)`: the points the model
            classifies correctly; the others count as broken at distance 0 by every attack.
        integral: "steps" (default: the exact area of the step curve, the paper's integral) or
            "trapezoid" (AttackBench's `analysis/utils.py`: the trapezoidal rule between the unique
            distances, to reproduce its tables).

    Returns:
        dict {attack name: float}: `(rho * eps* - A_a) / (rho * eps* - A*)` (see the module docstring),
        1.0 for the best attack on every point, 0.0 for one that never succeeds ("steps"); NaN for all
        when the best curve has no area to compare against (no finite best distance, or all equal).

    Raises:
        TypeError: `distances` not a non-empty dict, a value not numbers, `clean` not bool.
        ValueError: a value not 1-D, of another length than the others, with NaN or negative entries;
            `clean` of another shape; an unknown `integral`.

    References:
        Cina, Rony, Pintor, Demetrio, Demontis, Biggio, Ben Ayed & Roli (2025), "AttackBench: evaluating
        gradient-based attacks for adversarial examples", AAAI, https://arxiv.org/abs/2404.19460
        (sec. 3.3, Eq. 4-5; https://github.com/attackbench/AttackBench, analysis/utils.py)
    """
    integral = _checks.check_choice(integral, "integral", INTEGRALS)
    names, d, clean = _check(distances, clean)
    d = np.where(clean, d, 0.0)  # a point misclassified clean is broken without perturbation
    best = d.min(axis=0)
    finite = best[np.isfinite(best)]
    rho = float(clean.mean())
    if integral == "trapezoid":
        rho = float(np.count_nonzero(best) / len(best))  # AttackBench's clean accuracy: d* > 0
    if not len(finite):
        return dict.fromkeys(names, float("nan"))
    eps = float(finite.max())
    if integral == "steps":
        areas = np.mean(np.minimum(d, eps), axis=1)  # A_a: the exact area of each step curve on [0, eps*]
        best_area = float(np.mean(np.minimum(best, eps)))
    else:
        areas = np.array([_area_trapezoid(row, finite) for row in d])
        best_area = _area_trapezoid(best, finite)
    span = rho * eps - best_area
    if span <= 0:
        return dict.fromkeys(names, float("nan"))
    return {name: float((rho * eps - area) / span) for name, area in zip(names, areas)}
