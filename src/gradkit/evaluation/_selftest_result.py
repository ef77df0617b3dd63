"""`SelfTest`: the result of `gradkit.selftest`, its JSON form and its PASS/FAIL summary."""

import dataclasses

import numpy as np

from gradkit import _checks

_REFERENCE = "Zimmermann et al. 2022, https://arxiv.org/abs/2206.13991"


@dataclasses.dataclass(repr=False)
class SelfTest:
    """The outcome of the binarization test (`gradkit.selftest`) on `n` points.

    Attributes:
        passed: bool, True when at least one readout separated and the attack broke every binarized
            model whose readout separated.
        success_rate: float in [0, 1], the share of those models the attack broke; None if none
            separated.
        points: list of `n` dicts, one per point in order: "index", "correct" (the model classified the
            clean point correctly), "separated" (the readout separated the inner from the boundary
            points: the point was tested), "success" (the attack broke the binarized model; None when
            not tested), "broken_by" (the attack of the cascade that did, or None), "logit_difference"
            (d = z_1 - z_0 of the binarized model at the attack's example), "boundary_logit_difference"
            (the largest d over the boundary points) and "improvement" ((d - d_b) / d_b, the normalized
            logit-difference improvement).
        failed_setups: list of int, the indices whose readout did not separate (not tested).
        improvement: float or None, the mean normalized logit-difference improvement over the tested
            points; improvement_std: its standard deviation.
        eps: float; norm: `np.inf` or 2.0; attack: what ran (a version or attack name, or a list).
        n_inner, n_boundary: int, the points per readout; eta: float, the inner radius over eps.
        backend: str, the Keras backend; seconds: float, wall time.
    """

    passed: bool
    success_rate: float | None
    points: list
    failed_setups: list
    improvement: float | None
    improvement_std: float | None
    eps: float
    norm: float
    attack: object
    n_inner: int
    n_boundary: int
    eta: float
    backend: str
    seconds: float

    @classmethod
    def of(cls, points, **settings):
        """The `SelfTest` of the per-point records `points` (see the attributes) and `settings`."""
        tested = [p for p in points if p["separated"]]
        success = [bool(p["success"]) for p in tested]
        gains = [p["improvement"] for p in tested]
        return cls(
            passed=bool(tested) and all(success),
            success_rate=float(np.mean(success)) if tested else None,
            points=list(points),
            failed_setups=[p["index"] for p in points if not p["separated"]],
            improvement=float(np.mean(gains)) if tested else None,
            improvement_std=float(np.std(gains)) if tested else None,
            **settings,
        )

    @property
    def verdict(self):
        """ "PASS" or "FAIL"."""
        return "PASS" if self.passed else "FAIL"

    def to_dict(self):
        """A JSON-able dict of every attribute (norm as "linf" or "l2"), with "verdict"."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["norm"] = _checks.norm_name(self.norm)
        out["points"] = [dict(p) for p in self.points]
        out["verdict"] = self.verdict
        return out

    def summary(self):
        """The result as text: the settings, one row per point, the totals, and PASS or FAIL with why."""
        norm = _checks.norm_name(self.norm)
        lines = [
            f"Binarization test ({self.backend}): {len(self.points)} points, eps {self.eps:g} ({norm}), "
            f"attack {self.attack}, {self.n_inner} inner + {self.n_boundary} boundary points each "
            f"(eta {self.eta:g})",
            f"{'point':>6}{'correct':>9}{'readout':>11}{'broken':>8}{'d(x_adv)':>10}{'d_b':>8}"
            f"{'improvement':>13}  broken by",
        ]
        lines += [_row(p) for p in self.points]
        tested = len(self.points) - len(self.failed_setups)
        if tested:
            broken = round(self.success_rate * tested)
            lines.append(
                f"attack success rate {self.success_rate:.4f} ({broken} of {tested} binarized models); "
                f"normalized logit-difference improvement {self.improvement:.3f} +- "
                f"{self.improvement_std:.3f}; setups failed {len(self.failed_setups)} of {len(self.points)}"
            )
        lines.append(f"{self.verdict}: {self._why(tested)} ({_REFERENCE})")
        return "\n".join(lines)

    def _why(self, tested):
        if not tested:
            return (
                "no readout separated the inner from the boundary points, so nothing was tested (more "
                "features than points help: fewer n_inner, or a larger eps)"
            )
        if self.passed:
            return "the attack found the adversarial example that each binarized model provably has"
        missed = [p["index"] for p in self.points if p["separated"] and not p["success"]]
        shown = ", ".join(map(str, missed[:10])) + (", ..." if len(missed) > 10 else "")
        return (
            f"the attack missed the adversarial example that each binarized model provably has on "
            f"{len(missed)} of {tested} (points {shown}): it is too weak for this model, and its robust "
            "accuracy an overestimate (a non-differentiable step: surrogate=, BPDA; a randomized one: "
            'attack="rand")'
        )

    def __str__(self):
        return self.summary()

    def __repr__(self):
        rate = "None" if self.success_rate is None else f"{self.success_rate:.4f}"
        return (
            f"SelfTest({self.verdict}, success_rate={rate}, points={len(self.points)}, "
            f"failed_setups={len(self.failed_setups)}, eps={self.eps:g}, norm={_checks.norm_name(self.norm)})"
        )


def _row(p):
    def number(value, width, digits):
        return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    broken = "-" if p["success"] is None else "yes" if p["success"] else "no"
    return (
        f"{p['index']:>6}{'yes' if p['correct'] else 'no':>9}"
        f"{'separates' if p['separated'] else 'fails':>11}{broken:>8}"
        f"{number(p['logit_difference'], 10, 4)}{number(p['boundary_logit_difference'], 8, 4)}"
        f"{number(p['improvement'], 13, 3)}  {p['broken_by'] or '-'}"
    )
