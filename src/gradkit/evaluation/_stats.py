"""Uncertainty of accuracies: Wilson score intervals; McNemar's exact test for two models on the same points.

An accuracy on n test points is a binomial proportion; `wilson_interval` gives its 95% interval. Two models
evaluated on the same points are compared point by point (`compare`, `paired_comparison`): only the points
one keeps and the other loses carry information about their difference, and McNemar's exact test asks
whether those discordant points split evenly. Everything here is arithmetic on counts (scipy for the
binomial test).

References:
    Wilson (1927), "Probable inference, the law of succession, and statistical inference", JASA 22(158),
    https://doi.org/10.1080/01621459.1927.10502953
    McNemar (1947), "Note on the sampling error of the difference between correlated proportions or
    percentages", Psychometrika 12(2), https://doi.org/10.1007/BF02295996
    Brown, Cai & DasGupta (2001), "Interval estimation for a binomial proportion", Statistical Science 16(2),
    https://doi.org/10.1214/ss/1009213286 (why Wilson rather than the normal interval)
"""

import dataclasses
import hashlib
import math
import numbers

import numpy as np

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal: a two-sided 95% interval
METHOD = "95% Wilson score interval"


def wilson_interval(k, n, z=Z95):
    """The Wilson score interval of a proportion of `k` successes in `n` trials.

    `(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)` with `p = k/n` (Wilson 1927, eq. in
    Brown, Cai & DasGupta 2001, sec. 4.1): unlike the normal interval it stays inside [0, 1] and keeps
    its coverage near 0 and 1, where robust accuracies often lie.

    Args:
        k: int in [0, n], the number of successes (e.g. points still correctly classified).
        n: int >= 1, the number of trials (points).
        z: float > 0, the normal quantile. Defaults to 1.959964 (a 95% interval).

    Returns:
        `(low, high)`, floats with 0 <= low <= k/n <= high <= 1.

    Raises:
        ValueError: n < 1, k outside [0, n], either not an integer, or z <= 0.
    """
    for name, value in (("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if n < 1:
        raise ValueError(f"`n` must be >= 1. Received: n={n!r}")
    if not 0 <= k <= n:
        raise ValueError(f"`k` must be in [0, n={n}]. Received: k={k!r}")
    if not z > 0:
        raise ValueError(f"`z` must be > 0. Received: z={z!r}")
    p, z2 = k / n, z * z
    denominator = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    low = 0.0 if k == 0 else max(0.0, center - half)  # exactly 0 (1) there; rounding would miss it
    return low, 1.0 if k == n else min(1.0, center + half)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two models on the same points, compared point by point (`compare`).

    Attributes:
        difference: float in [-1, 1], accuracy of a minus accuracy of b, `(only_a - only_b) / n_points`.
        p_value: float in (0, 1], McNemar's exact two-sided p-value: the binomial test of `only_a`
            successes in `only_a + only_b` trials at 1/2 (1.0 when no point is discordant).
        only_a: int, points a keeps (classifies correctly) and b loses.
        only_b: int, points b keeps and a loses.
        n_points: int, the points compared.
        accuracy_a, accuracy_b: floats in [0, 1], each model's accuracy on them.
    """

    difference: float
    p_value: float
    only_a: int
    only_b: int
    n_points: int
    accuracy_a: float
    accuracy_b: float

    def __str__(self):
        return (
            f"difference {self.difference:+.4f} ({self.accuracy_a:.4f} - {self.accuracy_b:.4f} on "
            f"{self.n_points} points), McNemar exact p={self.p_value:.3g} ({self.only_a} points kept only "
            f"by a, {self.only_b} only by b)"
        )


def _flags(values, name):
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0 or not (arr.dtype == bool or np.isin(arr, (0, 1)).all()):
        raise ValueError(f"`{name}` must be a non-empty 1-D array of booleans. Received: {values!r:.80}")
    return arr.astype(bool)


def paired_comparison(correct_a, correct_b):
    """McNemar's exact test on two per-point correctness vectors of the same points.

    Args:
        correct_a, correct_b: bool arrays `(n,)`, point i correctly classified by model a (b), in the
            same order of the same points.

    Returns:
        `Comparison`.

    Raises:
        ValueError: not non-empty 1-D boolean arrays, or of different lengths.

    References:
        McNemar (1947), Psychometrika 12(2); the exact (binomial) form, as in Fagerland, Lydersen &
        Laake (2013), "The McNemar test for binary matched-pairs data", BMC Med. Res. Methodol. 13:91.
    """
    from scipy.stats import binomtest

    a, b = _flags(correct_a, "correct_a"), _flags(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ValueError(
            "`correct_a` and `correct_b` must describe the same points. "
            f"Received: {a.size} and {b.size} points"
        )
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(b & ~a))
    discordant = only_a + only_b
    p_value = float(binomtest(only_a, discordant, 0.5).pvalue) if discordant else 1.0
    return Comparison(
        difference=(only_a - only_b) / a.size,
        p_value=min(1.0, p_value),
        only_a=only_a,
        only_b=only_b,
        n_points=int(a.size),
        accuracy_a=float(a.mean()),
        accuracy_b=float(b.mean()),
    )


def points_digest(x, labels):
    """Hex SHA-256 of the points an evaluation ran on (dtype, shape and bytes of `x` and the labels)."""
    digest = hashlib.sha256()
    for a in (np.asarray(x), np.asarray(labels)):
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def _check_evaluation(result, name):
    if not all(hasattr(result, key) for key in ("robust", "eps", "norm")):
        raise TypeError(f"`{name}` must be a gradkit.Evaluation. Received: {type(result).__name__}")


def compare(result_a, result_b):
    """Compares two `gradkit.evaluate` results on the same points: the paired difference of their robust
    accuracies and McNemar's exact p-value.

    Two intervals that overlap can still hide a real difference: the models saw the same points, so the
    points both keep or both lose say nothing about which is better. Only the discordant points count.

    Args:
        result_a, result_b: `gradkit.Evaluation`s of the same points (same `x` and labels, in the same
            order), the same eps and norm.

    Returns:
        `Comparison`: `difference` (robust accuracy of a minus b), `p_value`, `only_a`, `only_b`,
        `n_points`, `accuracy_a`, `accuracy_b`.

    Raises:
        TypeError: an argument is not an `Evaluation`.
        ValueError: the results are on different points (count, or the points' SHA-256), another eps
            or another norm.

    References:
        McNemar (1947), "Note on the sampling error of the difference between correlated proportions or
        percentages", Psychometrika 12(2), https://doi.org/10.1007/BF02295996

    Example:
        >>> c = gradkit.compare(gradkit.evaluate(boosted, x, y, eps=0.1),
        ...                     gradkit.evaluate(single, x, y, eps=0.1))  # doctest: +SKIP
        >>> c.difference, c.p_value, c.only_a, c.only_b  # doctest: +SKIP
    """
    _check_evaluation(result_a, "result_a")
    _check_evaluation(result_b, "result_b")
    n_a, n_b = len(result_a.robust), len(result_b.robust)
    points_a, points_b = getattr(result_a, "points", None), getattr(result_b, "points", None)
    if n_a != n_b or (points_a is not None and points_b is not None and points_a != points_b):
        raise ValueError(
            "`result_a` and `result_b` must be evaluations of the same points (the same x and labels, in "
            f"the same order). Received: {n_a} and {n_b} points"
            + ("" if n_a != n_b else ", with different contents (their SHA-256 differ)")
        )
    if result_a.eps != result_b.eps or result_a.norm != result_b.norm:
        raise ValueError(
            "`result_a` and `result_b` must be evaluations at the same eps and norm. Received: "
            f"eps={result_a.eps:g}, norm={result_a.norm} and eps={result_b.eps:g}, norm={result_b.norm}"
        )
    return paired_comparison(result_a.robust, result_b.robust)
