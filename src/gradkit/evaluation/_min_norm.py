"""Per-sample minimal adversarial perturbations from minimum-norm attacks (FMN, DDN, FAB), and the whole
accuracy-vs-eps curve they give from one run."""

import dataclasses

import numpy as np

from gradkit import _checks
from gradkit.attacks import MIN_NORM_NAMES as NAMES
from gradkit.attacks import TABLE, check_single_input, decide, gradient_for, prepare
from gradkit.attacks.geometry import norms as _norms
from gradkit.gradients import preprocessed, row_shape


@dataclasses.dataclass(frozen=True)
class MinNormResult:
    """What `gradkit.min_norm` found, per sample.

    Attributes:
        norm: the norm the perturbations are measured in (0, 1, 2 or inf).
        norms: float64 `(n,)`: the smallest adversarial perturbation found (in `norm`, measured by
            gradkit in float64 on the returned examples), 0 for points misclassified clean, inf where no
            attack succeeded.
        x_adv: float32 shaped like `x`: that example (the clean input where the norm is 0 or inf).
        best_attack: `(n,)` str: the attack that found it, "clean" (misclassified clean) or "" (none).
    """

    norm: float
    norms: np.ndarray
    x_adv: np.ndarray
    best_attack: np.ndarray

    def accuracy_at(self, eps):
        """Robust accuracy at radius `eps` >= 0: the share of points whose minimal norm exceeds eps (a
        perturbation of norm <= eps breaks the others)."""
        eps = _checks.check_eps(eps)
        return float(np.mean(self.norms > eps))

    def curve(self, eps_list):
        """`[accuracy_at(eps) for eps in eps_list]`: non-increasing in eps, from this one run."""
        return [self.accuracy_at(eps) for eps in _checks.check_numbers(eps_list, "eps_list", minimum=0)]


def attack_for(name, norm):
    """The attack function `name` ("fmn", "ddn", "fab": `gradkit.attacks.<name>`) after checking that it
    takes `norm`."""
    _checks.check_choice(name, "attacks", NAMES)
    _checks.check_norm(norm, allowed=TABLE[name].norms, attack=name.upper())
    return TABLE[name].function


def _check(attack_names, norm, options):
    if "eps" in options:
        raise TypeError(
            "min_norm runs minimum-norm attacks, which take no `eps`: read the accuracy at a radius "
            f"with .accuracy_at(eps) or .curve(eps_list). Received: eps={options['eps']!r}"
        )
    if options.get("targeted"):
        raise ValueError(
            "min_norm measures untargeted robustness (`y` the true labels). Received: targeted=True"
        )
    if isinstance(attack_names, str):
        attack_names = (attack_names,)
    if not attack_names:
        raise ValueError(f"`attacks` must name at least one attack. Received: attacks={attack_names!r}")
    norm = _checks.check_norm(norm, allowed=(0.0, 1.0, 2.0, np.inf), attack="min_norm")
    return [(name, attack_for(name, norm)) for name in attack_names], norm


def min_norm(model, x, y, *, norm, attacks=("fmn",), batch_size=None, output=None, **attack_kwargs):
    """Each sample's smallest adversarial perturbation found by minimum-norm attacks, and so the robust
    accuracy at every eps from one run.

    Each attack of `attacks` runs on the points the model classifies correctly (clean); per sample the
    smallest perturbation over the attacks is kept. gradkit measures the norm itself (float64) on the
    returned examples and re-checks success on the model's real decision rule (argmax; the weighted hard
    vote of an ensemble or boosted model), so an attack's own report is never trusted.

    Run more than one attack where you can (`attacks=("fmn", "ddn")` for L2): the norms are upper
    bounds, only as good as the attacks. Every example the attacks return lies just past the decision
    boundary, by a logit gap any batch size reproduces (at most 1% further out), so a point counted
    as broken stays broken when its example is predicted alone.

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a fitted boosting
            estimator.
        x: float32 `(n, *input_shape)`, inside `clip_values` when given.
        y: true class ids `(n,)` or one-hot `(n, C)` (required).
        norm: 0 (FMN only), 1, 2 or np.inf ("l0", "l1", "l2", "linf" too).
        attacks: names among "fmn" (L0, L1, L2, Linf), "ddn" (L2) and "fab" (L1, L2, Linf), or one name.
            Defaults to ("fmn",).
        batch_size: rows per compiled call; output: the attacked output of a multi-output model.
        **attack_kwargs: passed to every attack (`steps`, `clip_values`, `seed`, ...). No `eps`.
            `preprocessing` (as the attacks take it) wraps the model once, for the attacks and the
            verdicts alike.

    Returns:
        `MinNormResult` with `norms` float64 `(n,)`, `x_adv`, `best_attack`, `accuracy_at(eps)` and
        `curve(eps_list)`.

    Raises:
        ValueError: an unknown attack name, a norm an attack does not take (DDN: 2 only; 0: FMN only),
            `targeted=True`; before any work.
        TypeError: `eps` in the attack arguments; several input arrays or a model with several inputs.

    References:
        Pintor, Roli, Brendel & Biggio (2021), "Fast minimum-norm adversarial attacks through adaptive
        norm constraints", NeurIPS, https://arxiv.org/abs/2102.12827
        Rony et al. (2019), "Decoupling direction and norm for efficient gradient-based L2 adversarial
        attacks and defenses", CVPR, https://arxiv.org/abs/1811.09600
        Croce & Hein (2020), "Minimally distorted adversarial examples with a fast adaptive boundary
        attack", ICML, https://arxiv.org/abs/1907.02044

    Example:
        >>> result = gradkit.min_norm(model, x, y, norm=2, attacks=("fmn", "ddn"),
        ...                           clip_values=(0, 1))  # doctest: +SKIP
        >>> result.curve([0.5, 1.0])  # doctest: +SKIP
    """
    fns, norm = _check(attacks, norm, attack_kwargs)
    check_single_input(model, x, "min_norm")
    model = preprocessed(model, attack_kwargs.pop("preprocessing", None), row_shape(x))  # judged in pixels
    if y is None:
        raise ValueError("`y` (the true labels) is required for min_norm. Received: y=None")
    clip = _checks.check_clip_values(attack_kwargs.get("clip_values"))
    x0, labels, n = prepare(gradient_for(model, output=output, batch_size=batch_size), x, y, clip)
    x0 = np.asarray(x0, np.float32)
    wrong = decide(model, x0, batch_size, output) != labels
    norms = np.where(wrong, 0.0, np.inf)
    x_adv, best = x0.copy(), np.where(wrong, "clean", "").astype(object)
    todo = np.flatnonzero(~wrong)
    for name, fn in fns:
        if not len(todo):
            break
        given = {"batch_size": batch_size, "output": output}  # passed on only when set
        options = dict(attack_kwargs, **{k: v for k, v in given.items() if v is not None})
        if name != "ddn":
            options["norm"] = norm
        adv = np.asarray(fn(model, x0[todo], labels[todo], **options), np.float32)
        broken = decide(model, adv, batch_size, output) != labels[todo]
        size = np.where(broken, _norms(adv - x0[todo], norm), np.inf)
        better = size < norms[todo]
        rows = todo[better]
        norms[rows], x_adv[rows], best[rows] = size[better], adv[better], name
    return MinNormResult(norm, norms, x_adv, best.astype(str))
