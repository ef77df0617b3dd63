"""`run_study`: load the data, train (or load) each model, attack it at every eps, write the outputs.

Each step saves what it finished (the model, then results.json; results.json again after each
(model, attack) curve), so a rerun with the same `out` and configuration loads the finished models
and keeps the finished rows. The training lives in `_train`, the model files in `_models`, the
output folder in `_outdir`.

References:
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD).
"""

import os
import time
import warnings
from collections.abc import Mapping

import keras
import numpy as np
from tqdm import tqdm

from gradkit._checks import fail
from gradkit._diagnostic_plots import plot_training_diagnostics
from gradkit.attacks import decide
from gradkit.backend import enable_determinism
from gradkit.errors import WorseThanRandomError
from gradkit.evaluation import near_chance
from gradkit.gradients import as_ensemble
from gradkit.plotting import plot_robustness
from gradkit.study import _attack, _certified, _compare, _outdir
from gradkit.study._config import MODELS, StudyConfig
from gradkit.study._models import load_model, model_path, save_model
from gradkit.study._norms import LABELS
from gradkit.study._prepare import prepare_data
from gradkit.study._table import INTERVAL
from gradkit.study._train import SINGLES, describe
from gradkit.study._train import train_boosted as _train_boosted
from gradkit.study._train import train_single as _train_single

_EVAL_BATCH = 512  # rows per compiled attack call


def run_study(config, *, progress=True, log=None):
    """Runs (or resumes) the study described by `config` and writes its files to its `out` folder.

    Args:
        config: a `StudyConfig`, or a dict of options (missing ones take their defaults, see
            `make_config`).
        progress: show a tqdm progress bar (stderr) for each training and for the attacks.
            Defaults to True. `format_table(result)` gives the table the command line prints.
        log: None (default: silent) or a callable taking one str: told what a rerun reused.

    Returns:
        The content of results.json: dict with "config", "backend", "dataset" (name), "norm" (of every
        eps: "linf", "l2" or "l1"), "adv_norm" (the norm adversarial training ran at), "n_train",
        "n_test", "models" ({name: {"clean_accuracy", "n_params", "train_seconds", "epochs", and for
        boosted models "members", "asked", "stop_reason", "estimator_weights"}}), "results"
        ([{"model", "attack", "eps", "accuracy", "n_points", "ci_low", "ci_high", "scope"}]: accuracy
        in [0, 1] of `n_points` points with its 95% Wilson interval; scope "worst_case" (the
        per-sample worst case over every attack), "cumulative" (fgsm, pgd, ...: broken by that attack
        at this eps or below) or "remaining" (standard, on the points the other attacks left); see
        `gradkit.study._attack`), "evaluations" (cost, per-attack figures and flags of each
        `gradkit.evaluate` run; it attacks only the `n_points` test points still robust when it
        runs, and its "accuracy" values are fractions of those), "warnings" (each model's flags,
        once), "samples" ({name: {"clean", "broken", "by"}} per test point), "grad_norm" ({name:
        [[float per epoch] per fit]}), "comparisons" (paired worst-case comparisons of models per eps:
        "a", "b", "eps", "difference", "p_value" (McNemar's exact test), "only_a", "only_b", ...) and
        "statistics" (the interval and test used, and what each scope means). With `certify`: a
        "certified" row per model and eps (scope "certified", a lower bound beside the worst case),
        "samples"' "certified" (per point the largest eps up to which it is certified) and
        "certified_checks" ("model", "eps", "certified", "worst_case", "contradicted": the indices of
        certified points an attack broke; see `gradkit.study._certified`).

    Raises:
        TypeError: `config` is neither a `StudyConfig` nor a dict.
        ConfigError: a bad option, an unusable `out`, or `out` holding a study with another
            configuration, backend or data; raised before anything is written.
        DatasetError: the data set cannot be loaded; nothing is written.
        ConfigError: with `certify`, a trained network holding a layer without a bound rule (named),
            raised before any attack; the trained models stay saved.
        WorseThanRandomError: a boosted model's first learner is worse than random (an adversarial eps
            too large for the data, too few epochs); the models finished before it stay saved.
    """
    if isinstance(config, Mapping):
        config = StudyConfig.from_options(**config)
    elif not isinstance(config, StudyConfig):
        fail("config", "a StudyConfig or a dict of study options", config, TypeError)
    log = log or (lambda message: None)
    out, settings, backend = config.out, config.to_dict(out=False), keras.backend.backend()
    _outdir.check_out(out, settings, backend)
    if config.deterministic:
        _determinism(log)
    data = prepare_data(config)
    state = _outdir.open_out(out, settings, backend, _outdir.fingerprint(data))
    state.update(
        dataset=data.name, n_train=len(data.x_train), n_test=len(data.x_test), n_classes=data.n_classes
    )
    trained = {name: _trained(name, config, data, state, progress, log) for name in MODELS}
    for name in MODELS if config.certify else ():  # before the attacks: a layer without a bound rule
        _certified.check_bounds(trained[name], name, config.certify)
    _attack_all(trained, config, data, state, log, progress)
    if config.certify:
        _certified.certify_all(trained, config, data, state, progress)
        _check_certificates(state, log)
    _write_outputs(state, out, data.y_test)
    return state


def _determinism(log):
    """Turns on the backend's deterministic ops; warns (and tells `log`) where it has none."""
    reason = enable_determinism()
    if reason:
        warnings.warn(f"--deterministic: {reason}", RuntimeWarning, stacklevel=3)
        log(f"warning: --deterministic: {reason}")


def _trained(name, config, data, state, progress, log):
    """The model `name`: loaded from `out` when a finished run saved it, else trained and saved."""
    path = model_path(config.out, name)
    if name in state["models"]:
        model = load_model(name, path)
        if model is not None:
            log(f"reused the trained model {name} from {path}")
            return model
        state["models"].pop(name)
    for key in ("results", "evaluations", "warnings"):  # stale rows of an unfinished model
        state[key] = [row for row in state[key] if row["model"] != name]
    state["samples"].pop(name, None)
    tic = time.perf_counter()
    try:
        model, curve = (_train_single if name in SINGLES else _train_boosted)(name, config, data, progress)
    except WorseThanRandomError as err:
        raise WorseThanRandomError(
            f"{name} could not be trained. {err} In the study: a smaller --adv-eps (adversarial models) "
            f"or more --epochs, with another --out (the models finished in {config.out!r} belong to this "
            "configuration)."
        ) from err
    seconds = time.perf_counter() - tic
    save_model(model, path)
    ensemble = as_ensemble(model)
    record = {
        "clean_accuracy": float(np.mean(ensemble.predict(data.x_test) == data.y_test)),
        "n_params": int(sum(m.count_params() for m in ensemble.models)),
        "train_seconds": round(seconds, 3),
        **describe(name, model, config),
    }
    state["models"][name], state["grad_norm"][name] = record, curve
    state["warnings"] += _training_warnings(name, record["clean_accuracy"], data.n_classes, config)
    _outdir.write_state(state, config.out)
    return model


def _training_warnings(name, accuracy, n_classes, config):
    """`[near_chance]` when the clean test accuracy is less than a quarter of the way from chance
    (1/K) to 1 (`gradkit.evaluation.near_chance`): the model barely learned the task, so its robust
    accuracies say nothing."""
    hint = "more --epochs"
    if name.startswith("adv_"):
        hint = f"adversarial training at eps {config.adv_eps:g} did not learn: a smaller --adv-eps or {hint}"
    found = near_chance(accuracy, n_classes, hint=hint)
    return [] if found is None else [{"model": name, "attack": "training", "eps": 0.0, **found}]


def _attack_all(trained, config, data, state, log, progress):
    """Adds the missing (model, eps) results to `state`, saving results.json after each."""
    done = {(r["model"], r["eps"]) for r in state["results"] if r["attack"] == _attack.WORST}
    reused = sum((name, e) in done for name in MODELS for e in config.epsilons)
    if reused:
        log(f"reused {reused} finished (model, eps) results from {os.path.join(config.out, 'results.json')}")
    todo = [(name, e) for name in MODELS for e in config.epsilons if (name, e) not in done]
    batch_size = min(len(data.x_test), _EVAL_BATCH)
    members = {name: len(as_ensemble(model).models) for name, model in trained.items()}
    weights = [_attack.work(config, eps, members[name], data.n_classes) for name, eps in todo]
    total = round(sum(weights)) or None
    # the bar counts estimated gradient evaluations per point, so its ETA weighs each step by its work
    with tqdm(total=total, desc="attacks", unit="grad", disable=not progress, unit_scale=True) as bar:
        for (name, eps), weight in zip(todo, weights):
            bar.set_postfix_str(f"{name} eps={eps:g}")
            record = state["samples"].get(name)
            if record is None:
                clean = decide(trained[name], data.x_test, batch_size) == data.y_test
                record = state["samples"][name] = _attack.new_record(clean, config.attacks)
            rows, evaluations = _attack.attack_at(trained[name], name, data, eps, record, config, batch_size)
            state["results"] += rows
            state["evaluations"] += evaluations
            _add_warnings(state, evaluations)
            _outdir.write_state(state, config.out)
            bar.update(weight)


_OWN_UNITS = ("eps_large", "data_out_of_range_for_model", "near_chance")  # the study's data, grid, training


def _add_warnings(state, evaluations):
    """Stores each model's flags once (by name), as "model (attack, eps=e): message"; not the flags of
    units and scale (`_OWN_UNITS`): the study scales its data to [0, 1] itself, its eps grid reaches
    large eps on purpose, and it checks the clean accuracy after training (`_training_warnings`)."""
    seen = {(w["model"], w["name"]) for w in state["warnings"]}
    for ev in evaluations:
        for flag in ev["flags"]:
            if flag["name"] not in _OWN_UNITS and (ev["model"], flag["name"]) not in seen:
                seen.add((ev["model"], flag["name"]))
                state["warnings"].append(
                    {"model": ev["model"], "attack": ev["attack"], "eps": ev["eps"], **flag}
                )


def _check_certificates(state, log):
    """results.json's "certified_checks" (certified <= worst case per point, `_certified.check`) and a
    warning per (model, eps) where an attack broke a certified point."""
    config = state["config"]
    checks = state["certified_checks"] = _certified.check(state["samples"], config["epsilons"])
    state["warnings"] = [w for w in state["warnings"] if w["attack"] != _certified.CERTIFIED]
    state["warnings"] += _certified.contradiction_warnings(checks, config["certify"], log)


def _write_outputs(state, out, labels):
    """results.json (rows and models in a fixed order, whatever was resumed), the CSV files, the plots."""
    attacks = [a for a in state["config"]["attacks"] if a != "standard"]
    names = (*MODELS, _attack.WORST, _certified.CERTIFIED, *attacks, "standard")
    order = {key: i for i, key in enumerate(names)}
    state["results"].sort(key=lambda r: (order[r["model"]], order[r["attack"]], r["eps"]))
    for r in state["results"]:  # rows of a study resumed from before --norm: Linf
        r.setdefault("norm", state["config"]["norm"])
    for key in ("models", "grad_norm", "samples"):
        state[key] = {name: state[key][name] for name in MODELS}
    state["comparisons"] = _compare.comparisons(state["samples"], state["config"]["epsilons"])
    scopes = {**_attack.SCOPES, **(_certified.SCOPE if state["config"].get("certify") else {})}
    state["statistics"] = {"interval": INTERVAL, "comparison": _compare.TEST, "scopes": scopes}
    _outdir.write_state(state, out)
    _outdir.write_csv(state["results"], out)
    _outdir.write_samples(state, labels, out)
    title, norm = f"{state['dataset']}, Keras backend {state['backend']}", LABELS[state["config"]["norm"]]
    method = state["config"].get("certify")
    plot_robustness(
        [r for r in state["results"] if r.get("scope") != "remaining"],
        os.path.join(out, "robustness.png"),
        title=f"Robustness ({norm}) - {title}",
        xlabel=f"eps ({norm} norm, input units; inputs in [0, 1])",
        caption=f"n = {state['n_test']} test points, Keras backend {state['backend']}; bands: {INTERVAL}; "
        f"{', '.join(attacks)}: cumulative (broken at this eps or below)"
        + (f"; certified ({method}): the lower edge of the band up to the worst case" if method else ""),
        lower=_certified.CERTIFIED if method else None,
    )
    path = os.path.join(out, "grad_norm.png")
    plot_training_diagnostics(_panels(state["grad_norm"]), path, title=f"Gradient norm - {title}")


def _panels(grad_norm):
    """grad_norm.png's panels: `{model: {"grad_norm": per-epoch values}}` for a model trained in one fit
    ("single", "adv_single"), a list of them, one per fit, for the boosted ones (members labelled)."""
    panels = {}
    for name, fits in grad_norm.items():
        fits = [fits] if fits and not isinstance(fits[0], list) else fits
        if name in SINGLES or len(fits) <= 1:
            panels[name] = {"grad_norm": [v for fit in fits for v in fit]}
        else:
            panels[name] = [{"grad_norm": fit} for fit in fits]
    return panels
