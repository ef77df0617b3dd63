"""What `evaluate` runs, checked before any work: the arguments, the data and the list of attacks (registry
names, "name/objective" with an ensemble objective, callables, or AutoAttack's versions: `_versions`)."""

import dataclasses
from collections.abc import Callable

import numpy as np

from gradkit import _checks
from gradkit._checks import broadcast_box, check_clip, check_mask
from gradkit.attacks import NAMES, TABLE, check_single_input, is_ensemble
from gradkit.evaluation import _budget, _certified, _versions
from gradkit.evaluation._single import check_single
from gradkit.evaluation._versions import QUERY_SHARE
from gradkit.gradients import (
    as_ensemble,
    check_classifier,
    check_labels,
    check_x,
    n_outputs,
    output_index,
    output_shape,
    resolve_loss,
)

OBJECTIVES = ("loss_sum", "logit_mean", "prob_mean", "vote_margin")
ENSEMBLE_OBJECTIVES = ("loss_sum", "vote_margin")
_WHY_CLASSES = (
    "the DLR loss divides by gaps between sorted logits, FAB-T targets a class other than the two "
    "most likely)"
)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One attack of the cascade: `name` as reported; `attack` (registry name), `objective` and the
    version's `settings` (sorted `(option, value)` pairs of `run_attack`), or `fn`."""

    name: str
    attack: str | None = None
    objective: str | None = None
    fn: Callable | None = None
    settings: tuple = ()

    @property
    def kind(self):
        """ "gradient" (iterative or one-step), "square" or "custom"."""
        if self.fn is not None:
            return "custom"
        return "square" if self.attack == "square" else "gradient"


@dataclasses.dataclass(frozen=True)
class Config:
    """The checked arguments of one evaluation (see `gradkit.evaluate`)."""

    eps: float
    norm: float
    clip_values: tuple | None
    batch_size: int | None
    seed: int | None
    n_queries: int
    steps: int
    verbose: int
    entries: tuple
    version: str = "custom"
    eot_iter: int = 20
    surrogate: object = None
    skipped: tuple = ()  # (attack, reason) of a version's attacks not run
    certify: str | None = None  # the bound method of the certified side ("ibp", "crown") or None
    inputs: object = None  # `_scale.Inputs`: classes, features, the data's and the model's ranges
    check_convergence: bool = False  # rerun with twice the budget, trace the ascents' losses
    box: tuple | None = None  # per-feature `(lo, hi)` float32 arrays (`clip_values` is their envelope)
    mask: object = None  # float32 0/1 array of the features that may change, or None
    budget: object = None  # a per-feature Linf eps, float32 array (`eps` is its max), or None

    @property
    def attack_eps(self):
        """The eps the attacks and callables are given: the per-feature budget, else `eps`."""
        return self.eps if self.budget is None else self.budget


def _expected():
    names = ", ".join(repr(n) for n in NAMES)
    return (
        f'"standard", an attack name or a list of attack names ({names}, optionally "name/objective" '
        f"with an objective in {', '.join(OBJECTIVES)}) or callables"
    )


def _entry(item, i):
    """The `Entry` of `attacks[i]` (`i` None: `attacks` is that one item)."""
    name = "attacks" if i is None else f"attacks[{i}]"
    if callable(item):
        return Entry(getattr(item, "__name__", type(item).__name__), fn=item)
    if not isinstance(item, str):
        _checks.fail(name, _expected(), item, TypeError)
    if item == "standard" and i is not None:
        _checks.fail(name, 'an attack name ("standard" is a whole cascade: pass attacks="standard")', item)
    attack, _, objective = item.partition("/")
    if attack not in NAMES or ("/" in item and objective not in OBJECTIVES):
        _checks.fail(name, _expected(), item)
    return Entry(item, attack, objective or None)


def plan_version(version, norm, ensemble, classes, eot_iter):
    """`(entries, skipped)` of AutoAttack's `version` at a checked `norm`: its attacks in order (on an
    ensemble each gradient attack once per `ENSEMBLE_OBJECTIVES`), and `(attack, reason)` of those needing
    more than `classes`."""
    entries, skipped = [], []
    objectives = ENSEMBLE_OBJECTIVES if ensemble else (None,)
    for run in _versions.runs(version, norm, eot_iter):
        needed = TABLE[run.attack].min_classes
        if classes and classes < needed:
            skipped.append((run.attack, f"needs at least {needed} classes; the model has {classes}"))
        else:
            entries += [
                Entry(f"{run.attack}/{o}" if o else run.attack, run.attack, o, settings=run.settings)
                for o in (objectives if TABLE[run.attack].gradients else (None,))
            ]
    return tuple(entries), tuple(skipped)


def plan(attacks, ensemble):
    """The entries `tuple[Entry]` for `attacks` ("standard": the standard version's Linf list, one name or
    a list); ValueError/TypeError for unknown names, bad objectives, an empty list or duplicate names."""
    if isinstance(attacks, str) and attacks == "standard":
        return plan_version("standard", np.inf, ensemble, 0, 1)[0]
    if isinstance(attacks, str) or callable(attacks):  # one attack: an error names `attacks` itself
        return (_entry(attacks, None),)
    try:
        items = list(attacks)
    except TypeError:
        _checks.fail("attacks", _expected(), attacks, TypeError)
    if not items:
        _checks.fail("attacks", _expected(), attacks)
    entries = tuple(_entry(item, i) for i, item in enumerate(items))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        _checks.fail("attacks", "a list without repeated names", names)
    return entries


def n_classes(model, x):
    """The number of classes C of `model` on checked inputs `x` (a one-unit output is 2); 0 if unknown."""
    first = as_ensemble(model).models[0]
    k = n_outputs(first, output_index(first, None), x)
    return 2 if k == 1 else k


def check_data(model, x, y):
    """Checked `(x float (n, ...), labels int64 (n,), C)`; errors before any work.

    Raises:
        TypeError: `x` is not one array (multi-input models are not evaluated), or `y` not numeric.
        ValueError: a model of several outputs or inputs (`check_single`: the message shows the
            one-output or one-input model to build), bad shapes, NaN or inf, `y` None, labels that are
            not class ids in [0, C).
    """
    first = as_ensemble(model).models[0]
    check_single(model)  # several outputs or inputs: the one-output or one-input model to build
    if isinstance(x, (list, tuple, dict)):
        check_single_input(model, x, "evaluate")  # in the words of every single-input entry point
    x, n = check_x(first, x)
    for member in as_ensemble(model).models:
        index = output_index(member, None)
        check_classifier(member, index, output_shape(member, index, x))
    classes = n_classes(model, x)
    if y is None:  # a robust accuracy needs the true labels, not the model's own predictions
        raise ValueError("`y` (the true labels) is required to evaluate robustness. Received: y=None")
    labels = check_labels(y, n, classes, resolve_loss("sparse_categorical_crossentropy"))
    return x, labels.astype(np.int64), classes


def _check_classes(entries, classes):
    for entry in entries:
        needed = TABLE[entry.attack].min_classes if entry.attack else 0
        if classes and classes < needed:
            free = f"free of {entry.attack!r} for a model of {classes} classes (it needs at least {needed}: "
            _checks.fail("attacks", free + _WHY_CLASSES, entry.name)


def check_config(
    model,
    classes,
    *,
    attacks,
    eps,
    norm,
    clip_values,
    batch_size,
    seed,
    n_queries,
    steps,
    verbose,
    version=None,
    eot_iter=20,
    surrogate=None,
    certify=None,
    inputs=None,
    check_convergence=False,
    mask=None,
):
    """The checked `Config` (`inputs`: its `_scale.Inputs`, kept as given); TypeError/ValueError in
    `gradkit._checks`' form for any bad argument."""
    version, attacks = _versions.check_version(version, attacks, eot_iter)
    norm = _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    certify = _certified.check_method(certify, norm, model)
    clip, mask = check_clip(clip_values), check_mask(mask)
    per_feature = clip is not None and bool(np.ndim(clip[0]))
    skipped = ()
    if version == "custom":
        entries = plan(attacks, is_ensemble(model))
        _check_classes(entries, classes)
    else:
        entries, skipped = plan_version(version, norm, is_ensemble(model), classes, eot_iter)
    eps, budget, entries, skipped = _budget.check(eps, norm, entries, skipped, version, certify)
    return Config(
        version=version,
        eot_iter=int(eot_iter),
        surrogate=surrogate,
        skipped=skipped,
        certify=certify,
        eps=_checks.check_eps(eps),
        budget=budget,
        norm=norm,
        clip_values=(float(clip[0].min()), float(clip[1].max())) if per_feature else clip,
        box=clip if per_feature else None,
        mask=mask,
        batch_size=_checks.check_batch_size(batch_size),
        seed=_checks.check_seed(seed),
        n_queries=_checks.check_int(n_queries, "n_queries", minimum=1),
        steps=_checks.check_steps(steps),
        verbose=_checks.check_int(verbose, "verbose", minimum=0),
        entries=entries,
        inputs=inputs,
        check_convergence=_checks.check_flag(check_convergence, "check_convergence"),
    )


def options(entry, config):
    """`gradkit.attacks.run_attack`'s keyword options for a registry `entry` (its version's settings too)."""
    attack, opts, settings = TABLE[entry.attack], {}, dict(entry.settings)
    share = settings.pop(QUERY_SHARE, 1)  # a version's Square that runs a share of `n_queries`
    if attack.budget_option == "n_queries":
        opts["n_queries"] = max(1, int(config.n_queries * share))
    elif attack.budget_option == "steps":
        opts["steps"] = config.steps
    opts.update(settings)
    if entry.objective:
        opts["objective"] = entry.objective
    if config.surrogate is not None and attack.eot:
        opts["surrogate"] = config.surrogate
    return opts


def check_range(x, clip_values, mask=None):
    """ValueError when `x` lies outside `clip_values` (the attacks could not keep it in range), or
    per-feature bounds or the mask do not broadcast to one input's shape."""
    if clip_values is not None and np.ndim(clip_values[0]) or mask is not None:
        clip_values, _ = broadcast_box(clip_values, mask, x)
        if clip_values is not None and (np.any(x < clip_values[0]) or np.any(x > clip_values[1])):
            _checks.fail("x", "inside its per-feature clip_values", f"array of shape {x.shape}")
    elif clip_values is not None and (x.min() < clip_values[0] or x.max() > clip_values[1]):
        _checks.fail("x", f"inside clip_values={clip_values}", f"array spanning [{x.min()}, {x.max()}]")


def check_adversarial(entry, x_rows, x_adv, config):
    """x_adv of a callable as float `(m, ...)`; ValueError if misshaped or outside the eps-ball or range."""
    x_adv = np.asarray(x_adv, dtype=x_rows.dtype)
    if x_adv.shape != x_rows.shape:
        raise ValueError(
            f"Attack {entry.name!r} must return x_adv shaped like x {x_rows.shape}. "
            f"Received: shape {x_adv.shape}"
        )
    delta = (x_adv - x_rows).reshape(len(x_rows), -1).astype(np.float64)
    size = np.linalg.norm(delta, ord=config.norm, axis=1)
    outside = size > config.eps * (1 + 1e-5) + 1e-6
    if config.budget is not None:  # per feature: each change within its own budget
        budget = np.broadcast_to(config.budget, x_rows.shape[1:]).reshape(1, -1)
        outside = np.abs(delta) > budget * (1 + 1e-5) + 1e-6
    lo, hi = config.clip_values or (-np.inf, np.inf)
    if np.any(outside) or x_adv.min() < lo - 1e-6 or x_adv.max() > hi + 1e-6:
        raise ValueError(
            f"Attack {entry.name!r} must return examples inside the eps-ball (eps={config.eps}) "
            f"and clip_values={config.clip_values}. Received: a perturbation of norm {size.max():.6g}"
        )
    return x_adv
