"""Accuracy under attack as a function of the perturbation size eps (a robustness curve)."""

import dataclasses
import warnings

import keras
import numpy as np
from keras import tree

from gradkit import _checks
from gradkit.attacks import (
    MIN_NORM_NAMES,
    TABLE,
    bim,
    check_single_input,
    default_eps_step,
    fgsm,
    gradient_for,
    pgd,
    predict_labels,
    prepare,
)
from gradkit.evaluation._min_norm import min_norm
from gradkit.evaluation._plan import Entry, check_adversarial
from gradkit.evaluation._suite import evaluate
from gradkit.gradients import WeightedEnsemble, as_ensemble, preprocessed, row_shape

# the attack functions run at each eps, by name (apgd, square, pgd, bim, fgsm); the minimum-norm ones
# (fmn, ddn, fab) run once through `min_norm`
_MIN_NORM = {TABLE[name].function for name in MIN_NORM_NAMES}
_ATTACKS = {a.function.__name__: a.function for a in TABLE.values() if a.function not in _MIN_NORM}


def _check_epsilons(epsilons):
    try:
        values = [float(e) for e in np.asarray(epsilons, dtype=np.float64).reshape(-1)]
    except (TypeError, ValueError) as err:
        raise ValueError(f"`epsilons` must be a sequence of numbers >= 0. Received: {epsilons!r}") from err
    if not values or np.ndim(epsilons) != 1:
        raise ValueError(f"`epsilons` must be a non-empty 1-D sequence. Received: epsilons={epsilons!r}")
    for e in values:
        _checks.check_eps(e, name="epsilons")
    return values


def _standard(model, x, y, *, eps, batch_size=None, **kwargs):
    """`evaluate` (AutoAttack's standard cascade) as an attack: its worst-case examples."""
    return evaluate(model, x, y, eps=eps, batch_size=batch_size, verbose=0, **kwargs).x_adv


@dataclasses.dataclass(frozen=True)
class _Threat:
    """The threat model a callable attack's examples are checked against (`_plan.check_adversarial`)."""

    eps: float
    norm: float
    clip_values: tuple | None
    budget: object = None  # a per-feature eps (`Config.budget`): a curve's eps are scalars


def _resolve_attack(attack):
    if callable(attack):
        return attack
    if isinstance(attack, str) and attack.lower() == "standard":
        return _standard
    if isinstance(attack, str) and attack.lower() in _ATTACKS:
        return _ATTACKS[attack.lower()]
    if isinstance(attack, str) and attack.lower() in MIN_NORM_NAMES:
        return attack.lower()
    raise ValueError(
        '`attack` must be "fgsm", "bim", "pgd", "apgd", "square", "standard", "fmn", "ddn", "fab" or a '
        "callable. "
        f"Received: attack={attack!r}"
    )


def _with_step(kwargs, eps, iterative):
    """The attack arguments at `eps`: BIM/PGD get eps_step = 2.5 * eps / steps unless given."""
    if not iterative or kwargs.get("eps_step") is not None:
        return kwargs
    steps = _checks.check_steps(kwargs["steps"])
    return {**kwargs, "eps_step": default_eps_step(eps, steps)}


def robustness_curve(model, x, y, *, attack, epsilons, batch_size=None, **attack_kwargs):
    """Accuracy of `model` on `(x, y)` under `attack` for each eps in `epsilons`.

    At every eps the attack runs on all of `x` with the true labels `y`; accuracy is the fraction of
    adversarial examples still classified as `y` (for an ensemble: its weighted hard vote). At eps = 0
    no attack runs, so the accuracy there is the clean accuracy. The built-in attacks at all epsilons
    share one compiled gradient function (it is traced once).

    For "bim" and "pgd", `eps_step` defaults to `2.5 * eps / steps` at each eps, the rule of thumb of
    the MadryLab `robustness` library (Engstrom et al. 2019) for the PGD of Madry et al.
    (2018), so every eps gets a step in proportion; an explicit `eps_step=` float is used unchanged at
    every eps. `steps` must be given.

    The curve also reports `zero_gradient_fraction`: the fraction of samples whose input gradient at the
    clean point (loss of `y`) is exactly zero in every component. Such samples cannot move under a
    gradient attack (saturated or dead units, argmax-like layers): their "robustness" is a silent no-op,
    not robustness (Athalye, Carlini & Wagner 2018).

    Args:
        model: a Keras classifier, a `gradkit.WeightedEnsemble` or an object with `as_ensemble()`.
        x: float inputs `(n, ...)` (or a list/dict for multi-input models) in the model's input units.
        y: true labels, class ids `(n,)` or one-hot `(n, n_classes)`.
        attack: "fgsm", "bim", "pgd", "apgd", "square", "standard" (`gradkit.evaluate`'s cascade: the
            accuracy is its per-sample worst case), or a callable
            `attack(model, x, y, eps=eps, **attack_kwargs)`
            returning adversarial inputs shaped like `x`, each inside the eps-ball (of
            `attack_kwargs["norm"]`, Linf by default) and `clip_values` (checked as `evaluate` checks
            a callable, for single-input models). Or a minimum-norm attack, "fmn", "ddn" or "fab"
            (`gradkit.min_norm`): ONE run gives each point's smallest perturbation, and the accuracy at
            every eps is the share of points whose norm exceeds eps (then the result also holds
            "norms", float64 `(n,)`, and "attack_accuracy" equals "accuracy").
        epsilons: non-empty 1-D sequence of floats >= 0 (input units), in the order to report.
        batch_size: rows per compiled call and per prediction batch; None (default): all at once.
        **attack_kwargs: passed to the attack at every eps, e.g. `steps`, `eps_step`, `norm`,
            `clip_values`, `loss`, `output`, `random_start`, `seed`. `loss` and `output` also choose
            the gradient used for `zero_gradient_fraction`; `preprocessing` (as the attacks take it)
            wraps the model once, so the attacks and the accuracies see pixels alike.

    Returns:
        dict with "eps" (list of float, as given); "accuracy" (list of float in [0, 1], one per eps):
        the share of points classified correctly at every eps' <= eps of the list and at the clean
        point (an example found at a smaller eps lies inside the larger ball, so the curve is
        non-increasing by construction, as the study's worst case); "attack_accuracy": the attack's own
        accuracy at each eps alone (it may rise where an attack overshoots, e.g. FGSM; a RuntimeWarning
        says so); and "zero_gradient_fraction" (float in [0, 1]).

    Raises:
        ValueError: an unknown `attack`, empty or negative `epsilons`, `eps` in `attack_kwargs`,
            "bim"/"pgd" without `steps`, bad labels or inputs; before any attack runs.
        TypeError: an `attack_kwargs` key the attack does not take.
        ValueError: a callable's examples misshaped or outside the eps-ball or `clip_values` (when it
            returns them).
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
        adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
        Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security", ICML,
        https://arxiv.org/abs/1802.00420
        Engstrom, Ilyas, Salman, Santurkar & Tsipras (2019), "Robustness (Python library)",
        https://github.com/MadryLab/robustness

    Example:
        >>> curve = gradkit.robustness_curve(model, x, y, attack="pgd", epsilons=[0, 0.05, 0.1],
        ...                                  steps=10, clip_values=(0, 1))  # doctest: +SKIP
        >>> curve["accuracy"]                                # [0.97, 0.61, 0.12]  # doctest: +SKIP
    """
    fn = _resolve_attack(attack)
    model = preprocessed(model, attack_kwargs.pop("preprocessing", None), row_shape(x))  # judged in pixels
    if y is None:
        raise ValueError("`y` (the true labels) is required for a robustness curve. Received: y=None")
    epsilons = _check_epsilons(epsilons)
    if "eps" in attack_kwargs:
        raise ValueError("Pass the perturbation sizes as `epsilons=`, not `eps=` in the attack arguments.")
    if fn in MIN_NORM_NAMES:
        return _from_min_norm(model, x, y, fn, epsilons, batch_size, attack_kwargs)
    if fn is _standard or (fn in _ATTACKS.values() and fn not in (fgsm, bim, pgd)):
        label = attack if isinstance(attack, str) else fn.__name__
        check_single_input(model, x, f"robustness_curve(attack={label!r})")
    iterative = fn in (bim, pgd)
    if iterative and "steps" not in attack_kwargs:
        raise ValueError(
            f'`steps` is required for attack="{fn.__name__}" (eps_step defaults to 2.5*eps/steps).'
        )
    if fn in _ATTACKS.values() or fn is _standard:
        attack_kwargs = {**attack_kwargs, "batch_size": batch_size}
    if not isinstance(model, (keras.Model, WeightedEnsemble)):
        model = as_ensemble(model)  # one ensemble object, so every eps reuses its cached gradient
    loss = attack_kwargs.get("loss") if fn in (fgsm, bim, pgd) else None
    grad = gradient_for(model, loss=loss, output=attack_kwargs.get("output"), batch_size=batch_size)
    x0, labels, n = prepare(grad, x, y, _checks.check_clip_values(attack_kwargs.get("clip_values")))
    if fn in _ATTACKS.values():  # validates every attack argument; at eps=0 the attack does no work
        fn(model, x0, labels, eps=0.0, **_with_step(attack_kwargs, 0.0, iterative))

    custom = None  # a callable's examples are judged as `evaluate` judges them (single-input models)
    if callable(attack) and isinstance(x0, np.ndarray):
        custom = Entry(getattr(fn, "__name__", type(fn).__name__), fn=fn)
        norm = _checks.check_norm(attack_kwargs.get("norm", np.inf), allowed=_checks.GRADIENT_NORMS)
        clip_values = _checks.check_clip_values(attack_kwargs.get("clip_values"))

    zero_fraction = _zero_fraction(grad, x0, labels, n)

    correct = {0.0: predict_labels(grad, x0, batch_size) == labels}
    for eps in sorted(set(epsilons) - {0.0}):
        x_adv = fn(model, x0, labels, eps=eps, **_with_step(attack_kwargs, eps, iterative))
        if custom:  # in the eps-ball and the range, or refused
            x_adv = check_adversarial(custom, x0, x_adv, _Threat(eps, norm, clip_values))
        correct[eps] = predict_labels(grad, x_adv, batch_size) == labels
    raw = [float(np.mean(correct[eps])) for eps in epsilons]
    accuracy = [float(np.mean(robust)) for robust in _nested(correct, epsilons)]
    _warn_rising(attack, epsilons, raw, accuracy)
    return {
        "eps": epsilons,
        "accuracy": accuracy,
        "attack_accuracy": raw,
        "zero_gradient_fraction": zero_fraction,
    }


def _from_min_norm(model, x, y, name, epsilons, batch_size, attack_kwargs):
    """The curve of a minimum-norm attack: one run (`min_norm`), the accuracy at every eps read from
    the per-sample norms (non-increasing by construction)."""
    norm = attack_kwargs.pop("norm", np.inf)
    result = min_norm(model, x, y, norm=norm, attacks=(name,), batch_size=batch_size, **attack_kwargs)
    loss = attack_kwargs.get("loss")
    grad = gradient_for(model, loss=loss, output=attack_kwargs.get("output"), batch_size=batch_size)
    x0, labels, n = prepare(grad, x, y, _checks.check_clip_values(attack_kwargs.get("clip_values")))
    accuracy = result.curve(epsilons)
    return {
        "eps": epsilons,
        "accuracy": accuracy,
        "attack_accuracy": list(accuracy),
        "zero_gradient_fraction": _zero_fraction(grad, x0, labels, n),
        "norms": result.norms,
    }


def _zero_fraction(grad, x0, labels, n):
    """The share of points whose input gradient at the clean point is exactly zero."""
    g = grad.compute(x0, labels, np.ones(n, np.float32), n)
    moving = sum(np.any(leaf.reshape(n, -1) != 0, axis=1) for leaf in tree.flatten(g))
    return float(np.mean(np.asarray(moving) == 0))


def _nested(correct, epsilons):
    """Per eps, the points classified correctly at every eps' <= eps (the clean point, eps' = 0, too):
    an example found at eps' lies in every larger ball, so a point broken there is broken at eps."""
    ordered = sorted(correct)
    return [np.logical_and.reduce([correct[e] for e in ordered if e <= eps]) for eps in epsilons]


def _warn_rising(attack, epsilons, raw, accuracy):
    """Warns when the attack alone left points robust at an eps that it broke at a smaller one."""
    missed = [(eps, a, b) for eps, a, b in zip(epsilons, raw, accuracy) if a > b]
    if not missed:
        return
    eps, a, b = missed[0]
    name = getattr(attack, "__name__", attack)
    warnings.warn(
        f"robustness_curve: the attack {name!r} failed at larger eps on points it broke at a smaller one "
        f"(at eps={eps:g} it alone leaves accuracy {a:.4f}; with the examples of smaller eps, which lie in "
        f"this ball, {b:.4f}). `accuracy` reports the latter (non-increasing by construction), "
        "`attack_accuracy` the attack's own figures: a one-step attack that overshoots (FGSM) or too few "
        "steps; use PGD or APGD with more steps.",
        RuntimeWarning,
        stacklevel=3,
    )
