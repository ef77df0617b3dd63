"""`run_study`: load the data, train (or load) each model, attack it at every eps, write the outputs.

Each step saves what it finished (the model, then results.json; results.json again after each
(model, attack) curve), so a rerun with the same `out` and configuration loads the finished models
and keeps the finished rows. The training lives in `_train`, the model files in `_models`, the
output folder in `_outdir`.

References:
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD).
"""

import dataclasses
import os
import time
from collections.abc import Mapping

import keras
import numpy as np
from tqdm import tqdm

from gradkit._checks import fail
from gradkit.backend import batch_multiple
from gradkit.gradients import as_ensemble
from gradkit.plotting import plot_grad_norm, plot_robustness
from gradkit.study import _outdir
from gradkit.study._config import MODELS, QUICK_SUBSET, ConfigError, StudyConfig
from gradkit.study._datasets import load_dataset, subsample
from gradkit.study._models import load_model, model_path, save_model
from gradkit.study._train import train_boosted as _train_boosted
from gradkit.study._train import train_single as _train_single

_CLIP = (0.0, 1.0)


def run_study(config, *, progress=True):
    """Runs (or resumes) the study described by `config` and writes its files to its `out` folder.

    Args:
        config: a `StudyConfig`, or a dict of options (missing ones take their defaults, see
            `make_config`): `out`, `dataset`, `model`, `epsilons`, `attacks`, `n_estimators`,
            `epochs`, `seed`, `batch_size`, `pgd_steps`, `adv_eps`, `quick`.
        progress: show a tqdm progress bar (stderr) for each training and for the attacks.
            Defaults to True. `format_table(result)` gives the table the command line prints.

    Returns:
        The content of results.json: dict with "config", "backend", "dataset" (name), "n_train",
        "n_test", "models" ({name: {"clean_accuracy", "n_params", "train_seconds"} plus
        "estimator_weights" for ensembles}), "results" ([{"model", "attack", "eps", "accuracy"}],
        accuracy a float in [0, 1]) and "grad_norm" ({name: [float per epoch]}).

    Raises:
        TypeError: `config` is neither a `StudyConfig` nor a dict.
        ConfigError: a bad option, an unusable `out`, or `out` holding a study with another
            configuration, backend or data; raised before anything is written.
        DatasetError: the data set cannot be loaded; nothing is written.
    """
    if isinstance(config, Mapping):
        config = StudyConfig.from_options(**config)
    elif not isinstance(config, StudyConfig):
        fail("config", "a StudyConfig or a dict of study options", config, TypeError)
    out, settings, backend = config.out, config.to_dict(out=False), keras.backend.backend()
    _outdir.check_out(out, settings, backend)
    data = _prepare_data(config)
    state = _outdir.open_out(out, settings, backend, _outdir.fingerprint(data))
    state.update(dataset=data.name, n_train=len(data.x_train), n_test=len(data.x_test))
    trained = {name: _trained(name, config, data, state, progress) for name in MODELS}
    _attack_all(trained, config, data, state, progress)
    _write_outputs(state, out)
    return state


def _prepare_data(config):
    """The data set, subsampled with `quick`, trimmed for data parallelism; checked against the model."""
    data = load_dataset(config.dataset, seed=config.seed)
    if config.quick:
        data = subsample(data, *QUICK_SUBSET, seed=config.seed)
    data = _fit_devices(data, config.batch_size)
    if config.model == "cnn" and data.x_train.ndim != 4:
        raise ConfigError(f'`model="cnn"` needs images; {data.name!r} holds flat features: use model="mlp".')
    return data


def _fit_devices(data, batch_size):
    """Under data parallelism (`gradkit study --devices N`, JAX), Keras needs every training batch to
    split evenly over the N devices: the batch size must be a multiple of N, and the last
    `n_train % N` training rows are dropped (a documented, deterministic trim). Test rows are padded
    by gradkit itself. Without a distribution the data is returned unchanged."""
    multiple = batch_multiple()
    if multiple == 1:
        return data
    if batch_size % multiple:
        raise ConfigError(
            f"--batch-size must be a multiple of the {multiple} devices. Received: {batch_size}"
        )
    keep = len(data.x_train) - len(data.x_train) % multiple
    return dataclasses.replace(data, x_train=data.x_train[:keep], y_train=data.y_train[:keep])


def _trained(name, config, data, state, progress):
    """The model `name`: loaded from `out` when a finished run saved it, else trained and saved."""
    path = model_path(config.out, name)
    if name in state["models"]:
        model = load_model(name, path)
        if model is not None:
            return model
        state["models"].pop(name)
    state["results"] = [row for row in state["results"] if row["model"] != name]  # stale rows
    tic = time.perf_counter()
    model, curve = (_train_single if name == "single" else _train_boosted)(name, config, data, progress)
    seconds = time.perf_counter() - tic
    save_model(model, path)
    ensemble = as_ensemble(model)
    record = {
        "clean_accuracy": float(np.mean(ensemble.predict(data.x_test) == data.y_test)),
        "n_params": int(sum(m.count_params() for m in ensemble.models)),
        "train_seconds": round(seconds, 3),
    }
    if name != "single":
        record["estimator_weights"] = [float(w) for w in model.estimator_weights_]
    state["models"][name], state["grad_norm"][name] = record, curve
    _outdir.write_state(state, config.out)
    return model


def _todo(config, state):
    """{(model, attack): [eps not yet in state["results"]]}, without empty entries."""
    done = {(r["model"], r["attack"], r["eps"]) for r in state["results"]}
    todo = {
        (name, attack): [e for e in config.epsilons if (name, attack, e) not in done]
        for name in MODELS
        for attack in config.attacks
    }
    return {key: epsilons for key, epsilons in todo.items() if epsilons}


def _attack_all(trained, config, data, state, progress):
    """Adds the missing (model, attack, eps) rows to `state`, saving results.json after each curve."""
    from gradkit.evaluation import robustness_curve  # looked up at each call: tests replace it there

    todo = _todo(config, state)
    targets = {name: as_ensemble(model) for name, model in trained.items()}  # one gradient cache each
    batch_size = min(len(data.x_test), 1024)
    with tqdm(total=sum(map(len, todo.values())), desc="attacks", unit="eps", disable=not progress) as bar:
        for (name, attack), epsilons in todo.items():
            options = {"steps": config.pgd_steps, "seed": config.seed} if attack == "pgd" else {}
            curve = robustness_curve(
                targets[name], data.x_test, data.y_test, attack=attack, epsilons=epsilons,
                batch_size=batch_size, clip_values=_CLIP, **options,
            )  # fmt: skip
            state["results"] += [
                {"model": name, "attack": attack, "eps": e, "accuracy": a}
                for e, a in zip(epsilons, curve["accuracy"])
            ]
            _outdir.write_state(state, config.out)
            bar.update(len(epsilons))


def _write_outputs(state, out):
    """results.json (rows and models in a fixed order, whatever was resumed), results.csv, the plots."""
    order = {key: i for i, key in enumerate(MODELS + tuple(state["config"]["attacks"]))}
    state["results"].sort(key=lambda r: (order[r["model"]], order[r["attack"]], r["eps"]))
    for key in ("models", "grad_norm"):
        state[key] = {name: state[key][name] for name in MODELS}
    _outdir.write_state(state, out)
    _outdir.write_csv(state["results"], out)
    title = f"{state['dataset']}, Keras backend {state['backend']}"
    plot_robustness(state["results"], os.path.join(out, "robustness.png"), title=f"Robustness - {title}")
    plot_grad_norm(state["grad_norm"], os.path.join(out, "grad_norm.png"), title=f"Gradient norm - {title}")
