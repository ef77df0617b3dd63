"""`Evaluation`: the result of `gradkit.evaluate`, its JSON form and its summary table."""

import dataclasses

import numpy as np

from gradkit import _checks
from gradkit.evaluation import _certified, _convergence, _flags, _scale
from gradkit.evaluation._stats import METHOD, wilson_interval

_WHY = (
    "the model barely does the task on these points (untrained, or given data in other units, layout or "
    "label order than it was trained on)"
)
_HINT = "compare with its accuracy after training, and check the data's range against clip_values"


@dataclasses.dataclass(repr=False)
class Evaluation:
    """The outcome of `gradkit.evaluate` on `n` points.

    Attributes:
        clean_accuracy: float in [0, 1], accuracy on the unperturbed points (the model's real decision rule).
        robust_accuracy: float in [0, 1], the per-sample worst case over every attack run: the fraction of
            points correctly classified clean and under every attack.
        robust: bool `(n,)`, which points those are.
        broken_by: list of `n` str or None: "clean" for a point misclassified without attack, else the
            name of the first attack that fooled it ("apgd-ce", "apgd-t/vote_margin", ...), None if robust.
        x_adv: float32 array shaped like `x`: per point the example that broke it (`x` itself for
            "clean"), else the last example tried.
        per_attack: dict name -> {"accuracy": accuracy of that attack alone on the points it ran on (None
            if it ran on none), "robust_accuracy": cumulative robust accuracy after it, "n_points",
            "n_broken", "n_forwards", "n_gradients", "seconds"}, in the order run.
        n_forwards: int, rows evaluated without a gradient (forward passes), clean predictions included.
        n_gradients: int, rows evaluated with an input gradient.
        seconds: float, wall time, summed over resumed runs.
        flags: list of dicts {"name", "message", "reference"}: signs of attack failure, and of a model,
            data or eps in other units than assumed ("near_chance", "eps_large",
            "data_out_of_range_for_model"); a flag explains, it refuses nothing.
        eps: float, the perturbation budget; norm: `np.inf`, 2.0 or 1.0.
        attacks: list of the attack names, in cascade order.
        backend: str, the Keras backend that ran it.
        clip_values: `(min, max)` floats or None, the input range.
        points: str or None, hex SHA-256 of the points evaluated (`x` and labels): `gradkit.compare`
            refuses two results whose points differ.
        version: str, the version run ("standard", "plus", "rand", "malt") or "custom".
        skipped: list of `[attack, reason]` pairs: the version's attacks that did not run (too few
            classes).
        certified: bool `(n,)` or None: the points certified robust at eps (`certify=`), a lower bound
            of `robust`; certify: the bound method ("ibp", "crown") or None.
        scale: dict or None, eps against the input range: "range" `[lo, hi]` (`clip_values`, or the
            data's [min, max] when None: "range_of" "clip_values" or "data"), "eps", "eps_of_range"
            (eps / (hi - lo)), "diameter" (the box's diameter in the norm: `(hi - lo) * d ** (1 / p)`
            over the d input features; hi - lo in Linf) and "eps_of_diameter", "data_range", "model_range"
            (the range the model's first Rescaling/Normalization layers imply, or None), "model_layers",
            "n_classes", "n_features".

    The property `interval` is the 95% Wilson score interval of `robust_accuracy` on the `n` points.
    """

    clean_accuracy: float
    robust_accuracy: float
    robust: np.ndarray
    broken_by: list
    x_adv: np.ndarray
    per_attack: dict
    n_forwards: int
    n_gradients: int
    seconds: float
    flags: list
    eps: float
    norm: float
    attacks: list
    backend: str
    clip_values: tuple | None = None
    points: str | None = None
    version: str = "custom"
    skipped: list = dataclasses.field(default_factory=list)
    scale: dict | None = None
    certified: np.ndarray | None = None
    certify: str | None = None

    @property
    def certified_accuracy(self):
        """The fraction of points certified at eps (a lower bound of the true robust accuracy), or None."""
        return (
            None if self.certified is None else float(np.mean(self.certified)) if len(self.certified) else 0.0
        )

    @property
    def certified_interval(self):
        """`(low, high)`: the 95% Wilson interval of `certified_accuracy`, or None."""
        return (
            None
            if self.certified is None
            else wilson_interval(int(np.sum(self.certified)), len(self.certified))
        )

    @property
    def interval(self):
        """`(low, high)`: the 95% Wilson score interval of `robust_accuracy` (`n` = the points evaluated;
        Wilson 1927, see `gradkit.evaluation.wilson_interval`)."""
        return wilson_interval(int(np.sum(self.robust)), len(self.robust))

    def to_dict(self):
        """A JSON-able dict of all but `x_adv`: norm as "linf", "l2" or "l1", `robust` as a list of bools, and
        "interval" ([low, high], the 95% Wilson interval of `robust_accuracy`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "x_adv"}
        out["robust"] = [bool(r) for r in self.robust]
        out["norm"] = _checks.norm_name(self.norm)
        out["clip_values"] = None if self.clip_values is None else list(self.clip_values)
        out["per_attack"] = {k: dict(v) for k, v in self.per_attack.items()}
        out["flags"] = [dict(f) for f in self.flags]
        out["interval"] = list(self.interval)
        out["skipped"] = [list(s) for s in self.skipped]
        if self.certified is not None:
            out["certified"] = [bool(c) for c in self.certified]
            out["certified_accuracy"] = self.certified_accuracy
            out["certified_interval"] = list(self.certified_interval)
        return out

    def summary(self):
        """The result as a text table: the header (backend, points, eps in input units and as a share of
        the range, version and the version's attacks skipped), one row per attack (points attacked, its
        accuracy on them, robust accuracy after it; a skipped attack: the reason), then the totals and the
        flags."""
        n = len(self.robust)
        skipped = f" ({', '.join(a for a, _ in self.skipped)} skipped)" if self.skipped else ""
        lines = [
            f"Evaluation ({self.backend}): {n} points, {_scale.text(self.scale, self.eps, self.norm)}, "
            f"version {self.version}{skipped}",
            f"{'attack':<28}{'points':>8}{'accuracy':>10}{'robust':>9}{'seconds':>9}",
            f"{'clean':<28}{n:>8}{self.clean_accuracy:>10.4f}{self.clean_accuracy:>9.4f}{'':>9}",
        ]
        for name, r in self.per_attack.items():
            acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
            lines.append(
                f"{name:<28}{r['n_points']:>8}{acc:>10}{r['robust_accuracy']:>9.4f}{r['seconds']:>9.1f}"
            )
        lines += [f"{attack:<28}skipped: {reason}" for attack, reason in self.skipped]
        low, high = self.interval
        lines.append(
            f"robust accuracy {self.robust_accuracy:.4f} [{low:.4f}, {high:.4f}] ({METHOD}, n={n}; "
            f"clean {self.clean_accuracy:.4f}); "
            f"{self.n_forwards} forwards, {self.n_gradients} gradients, {self.seconds:.1f} s"
        )
        if self.certified is not None:
            c_low, c_high = self.certified_interval
            lines.append(
                f"certified accuracy {self.certified_accuracy:.4f} [{c_low:.4f}, {c_high:.4f}] "
                f"({self.certify}): robust accuracy lies between it and {self.robust_accuracy:.4f}"
            )
        if self.flags:
            lines.append("flags:")
            lines += [f"  [{f['name']}] {f['message']} ({f['reference']})" for f in self.flags]
        return "\n".join(lines)

    def __str__(self):
        return self.summary()

    def __repr__(self):
        norm = "inf" if self.norm == np.inf else int(self.norm)
        return (
            f"Evaluation(robust_accuracy={self.robust_accuracy:.4f}, "
            f"clean_accuracy={self.clean_accuracy:.4f}, eps={self.eps:g}, norm={norm}, "
            f"attacks={self.attacks}, flags={[f['name'] for f in self.flags]})"
        )


def from_state(state, config, *, weights=(), shares=None, backend, certified=None, start=0):
    """The `Evaluation` of a finished `_state.State` under the checked `config`, with its flags.

    `weights`: the ensemble weights, or () for one network; `shares`: the members' gradient shares
    `(K, n)` of an ensemble, or None; `backend`: the Keras backend's name; `certified`: bool `(n,)` of
    the certified points or None; `start`: the index of the first point (in the flags' messages).
    """
    scale = _scale.scale(config)
    robust_accuracy = float(state.robust.mean())
    classes = config.inputs.classes if config.inputs is not None else 0
    found = [
        _flags.near_chance(state.clean_accuracy, classes, _WHY, _HINT) if classes else None,
        _scale.eps_flag(scale, config.norm, state.clean_accuracy, robust_accuracy),
        _scale.range_flag(config.inputs, config.clip_values),
        _flags.zero_gradient(state.zero_gradient),
        _flags.no_gradient(state.per_attack),
        _flags.probabilities(state.from_probabilities),
        _flags.randomized(state.randomized, config.version),
        _flags.unconfirmed(state.unconfirmed),
        *_flags.late_breaks(config.entries, state.per_attack),
        _flags.one_network(weights),
        _flags.dominant_gradient(shares) if shares is not None else None,
        _certified.contradicted(certified, state.robust, start),
        _convergence.not_converged(config, state.per_attack, state.broken_by, start),
        _convergence.still_improving(state.per_attack),
    ]
    return Evaluation(
        clean_accuracy=state.clean_accuracy,
        robust_accuracy=robust_accuracy,
        robust=state.robust.copy(),
        broken_by=list(state.broken_by),
        x_adv=state.x_adv,
        per_attack=dict(state.per_attack),
        n_forwards=state.n_forwards,
        n_gradients=state.n_gradients,
        seconds=state.seconds,
        flags=[f for f in found if f is not None],
        eps=config.eps,
        norm=config.norm,
        attacks=[e.name for e in config.entries],
        backend=backend,
        clip_values=config.clip_values,
        version=config.version,
        skipped=[list(s) for s in config.skipped],
        certified=None if certified is None else np.asarray(certified, bool).copy(),
        certify=config.certify if certified is not None else None,
        scale=scale,
    )
