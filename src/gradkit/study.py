"""`gradkit study`: train a single network, AdaBoost.M1 and adversarial boosting, attack each, report.

The study trains three models on one data set (`gradkit.datasets`), all with
`gradkit.GradientNormCallback`:

- `single`: one network trained for `epochs * n_estimators` epochs, as many as AdaBoost.M1's members
  together;
- `adaboost_m1`: `gradkit.AdaBoostM1` with `n_estimators` rounds of `epochs` epochs;
- `adv_boost`: the same with `adversarial={"attack": "fgsm", "eps": adv_eps, "clip_values": (0, 1)}`:
  each round also trains on FGSM examples against the ensemble so far (see `gradkit.SAMME`).

Then it attacks each model with each attack at each eps through `gradkit.robustness_curve`
(`clip_values=(0, 1)`; PGD with `pgd_steps` steps, `eps_step = 2.5 * eps / pgd_steps`, random start
seeded with `seed`) and writes to the output directory:

    config.json          the configuration, backend and a data fingerprint (a rerun must match them)
    results.json         config, backend, dataset, n_train, n_test, models, results, grad_norm
    results.csv          the result rows: model, attack, eps, accuracy
    robustness.png       accuracy vs eps, one line per model and attack
    grad_norm.png        per-epoch gradient norm of each model during training
    single.keras         the single network; adaboost_m1/, adv_boost/: `gradkit.load`-able directories

`grad_norm[name]` holds the epoch means of `grad_norm`, in training order; for an ensemble, its members'
curves one after the other (round 0 of `adv_boost` fits twice: clean, then clean + adversarial).

Every file is written atomically (temporary file, then `os.replace`), and results.json after each model
and each (model, attack, eps) row, so an interrupted run resumes: rerun it with the same `out` and
configuration, and finished models are loaded instead of retrained and finished rows are kept.

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (FGSM, adversarial training).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD).
"""

import csv
import dataclasses
import hashlib
import json
import math
import numbers
import os
import time
import warnings

import keras
import numpy as np
from tqdm import tqdm

from gradkit import backend as gradkit_backend
from gradkit import datasets
from gradkit.atomic import write_atomic
from gradkit.ensemble import as_ensemble

MODELS = ("single", "adaboost_m1", "adv_boost")
MODEL_FILES = {"single": "single.keras", "adaboost_m1": "adaboost_m1", "adv_boost": "adv_boost"}
QUICK_SUBSET = (2000, 1000)  # at most this many train / test samples with quick=True
DEFAULTS = {
    "out": "runs/study",
    "dataset": "digits",
    "model": "cnn",
    "epsilons": [0.0, 0.02, 0.05, 0.1, 0.2, 0.3],
    "attacks": ["fgsm", "pgd"],
    "n_estimators": 5,
    "epochs": 4,
    "seed": 0,
    "batch_size": 32,
    "pgd_steps": 10,
    "adv_eps": 0.1,
    "quick": False,
}
QUICK = {"epsilons": [0.0, 0.1, 0.3], "n_estimators": 2, "epochs": 3}
_MINIMUM = {"n_estimators": 1, "epochs": 1, "seed": 0, "batch_size": 1, "pgd_steps": 1}


def _fit_devices(data, batch_size):
    """Under data parallelism (`gradkit study --devices N`, JAX), Keras needs every training batch to
    split evenly over the N devices: the batch size must be a multiple of N, and the last
    `n_train % N` training rows are dropped (a documented, deterministic trim). Test rows are padded
    by gradkit itself. Without a distribution the data is returned unchanged."""
    multiple = gradkit_backend.batch_multiple()
    if multiple == 1:
        return data
    if batch_size % multiple:
        raise ConfigError(
            f"--batch-size must be a multiple of the {multiple} devices. Received: {batch_size}"
        )
    keep = len(data.x_train) - len(data.x_train) % multiple
    return dataclasses.replace(data, x_train=data.x_train[:keep], y_train=data.y_train[:keep])


def run_study(config, *, progress=True):
    """Runs (or resumes) the study described by `config` and writes its files to `config["out"]`.

    Args:
        config: dict of options (missing ones take their defaults, see `make_config`): `out`,
            `dataset`, `model`, `epsilons`, `attacks`, `n_estimators`, `epochs`, `seed`,
            `batch_size`, `pgd_steps`, `adv_eps`, `quick`.
        progress: show a tqdm progress bar (stderr) for each training and for the attacks.
            Defaults to True. `format_table(result)` gives the table the command line prints.

    Returns:
        The content of results.json: dict with "config", "backend", "dataset" (name), "n_train",
        "n_test", "models" ({name: {"clean_accuracy", "n_params", "train_seconds"} plus
        "estimator_weights" for ensembles}), "results" ([{"model", "attack", "eps", "accuracy"}],
        accuracy a float in [0, 1]) and "grad_norm" ({name: [float per epoch]}).

    Raises:
        ConfigError: a bad option, an unusable `out`, or `out` holding a study with another
            configuration, backend or data; raised before anything is written.
        gradkit.datasets.DatasetError: the data set cannot be loaded; nothing is written.
    """
    config = make_config(**config)
    out = config.pop("out")
    backend = keras.backend.backend()
    _check_out(out, config, backend)
    data = datasets.load_dataset(config["dataset"], seed=config["seed"])
    if config["quick"]:
        data = datasets.subsample(data, *QUICK_SUBSET, seed=config["seed"])
    data = _fit_devices(data, config["batch_size"])
    if config["model"] == "cnn" and data.x_train.ndim != 4:
        raise ConfigError(f'`model="cnn"` needs images; {data.name!r} holds flat features: use model="mlp".')
    state = _open_out(out, config, backend, _fingerprint(data))
    state.update(dataset=data.name, n_train=len(data.x_train), n_test=len(data.x_test))
    trained = {name: _trained(name, config, data, state, out, progress) for name in MODELS}
    _attack_all(trained, config, data, state, out, progress)
    _write_outputs(state, out)
    return state


def _fingerprint(data):
    digest = hashlib.sha256()
    for a in (data.x_train, data.y_train, data.x_test, data.y_test):
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def _trained(name, config, data, state, out, progress):
    """The model `name`: loaded from `out` when a finished run saved it, else trained and saved."""
    path = os.path.join(out, MODEL_FILES[name])
    if name in state["models"]:
        model = _load_model(name, path)
        if model is not None:
            return model
        state["models"].pop(name)
    state["results"] = [row for row in state["results"] if row["model"] != name]  # stale rows
    tic = time.perf_counter()
    model, curve = (_train_single if name == "single" else _train_boosted)(name, config, data, progress)
    seconds = time.perf_counter() - tic
    _save_model(model, path)
    ensemble = as_ensemble(model)
    clean = float(np.mean(ensemble.predict(data.x_test) == data.y_test))
    record = {
        "clean_accuracy": clean,
        "n_params": int(sum(m.count_params() for m in ensemble.models)),
        "train_seconds": round(seconds, 3),
    }
    if name != "single":
        record["estimator_weights"] = [float(w) for w in model.estimator_weights_]
    state["models"][name], state["grad_norm"][name] = record, curve
    _write_json(state, os.path.join(out, "results.json"))
    return model


def build_model(kind, input_shape, n_classes, *, learning_rate=3e-3):
    """A compiled classifier for the study: "cnn" or "mlp", softmax over `n_classes`.

    "cnn": Conv2D(16, 3) - MaxPool(2) - Conv2D(32, 3) - MaxPool(2) - Flatten - Dense(n_classes) (the
    pools only while the image is at least 4 pixels high). "mlp": Flatten - Dense(64) -
    Dense(n_classes). ReLU activations, Adam(`learning_rate`), sparse categorical cross-entropy.

    Args:
        kind: "cnn" (needs images `(h, w, c)`) or "mlp".
        input_shape: shape of one sample, e.g. `(8, 8, 1)`.
        n_classes: number of classes K >= 2.
        learning_rate: Adam's learning rate. Defaults to 3e-3.

    Raises:
        ValueError: "cnn" on flat `(d,)` inputs.
    """
    layers = keras.layers
    stack = [keras.Input(tuple(input_shape))]
    if kind == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f'`kind="cnn"` needs images (h, w, c). Received: input_shape={input_shape}')
        height = input_shape[0]
        for filters in (16, 32):
            stack.append(layers.Conv2D(filters, 3, padding="same", activation="relu"))
            if height >= 4:
                stack.append(layers.MaxPooling2D(2))
                height //= 2
        stack.append(layers.Flatten())
    else:
        stack += [layers.Flatten(), layers.Dense(64, activation="relu")]
    stack.append(layers.Dense(n_classes, activation="softmax"))
    model = keras.Sequential(stack)
    model.compile(
        keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    return model


class _EpochLog(keras.callbacks.Callback):
    """Keeps `logs["grad_norm"]` of every epoch (of every fit) and advances a progress bar."""

    def __init__(self, bar):
        super().__init__()
        self.bar, self.values = bar, []

    def on_epoch_end(self, epoch, logs=None):
        self.values.append(float((logs or {})["grad_norm"]))
        self.bar.update(1)


def _fit_kwargs(config, epochs, log):
    from gradkit.callbacks import GradientNormCallback

    callbacks = [GradientNormCallback(), log]
    return {"epochs": epochs, "batch_size": config["batch_size"], "verbose": 0, "callbacks": callbacks}


def _train_single(name, config, data, progress):
    epochs = config["epochs"] * config["n_estimators"]
    with tqdm(total=epochs, desc=f"train {name}", unit="epoch", disable=not progress) as bar:
        log = _EpochLog(bar)
        keras.utils.set_random_seed(config["seed"])
        model = build_model(config["model"], data.x_train.shape[1:], data.n_classes)
        model.fit(data.x_train, data.y_train, **_fit_kwargs(config, epochs, log))
    return model, log.values


def _train_boosted(name, config, data, progress):
    from gradkit.boosting import AdaBoostM1

    adversarial = None
    epochs = config["epochs"] * config["n_estimators"]
    if name == "adv_boost":
        adversarial = {"attack": "fgsm", "eps": config["adv_eps"], "clip_values": (0.0, 1.0)}
        epochs += config["epochs"]  # round 0 trains twice
    with tqdm(total=epochs, desc=f"train {name}", unit="epoch", disable=not progress) as bar:
        log = _EpochLog(bar)
        estimator = AdaBoostM1(
            lambda: build_model(config["model"], data.x_train.shape[1:], data.n_classes),
            n_estimators=config["n_estimators"],
            fit_kwargs=_fit_kwargs(config, config["epochs"], log),
            random_state=config["seed"],
            adversarial=adversarial,
            verbose=0,
        )
        estimator.fit(data.x_train, data.y_train)
    return estimator, log.values


def _attack_all(trained, config, data, state, out, progress):
    """Adds the missing (model, attack, eps) rows to `state`, saving results.json after each curve."""
    from gradkit.robustness import robustness_curve

    done = {(r["model"], r["attack"], r["eps"]) for r in state["results"]}
    todo = {
        (name, attack): [e for e in config["epsilons"] if (name, attack, e) not in done]
        for name in MODELS
        for attack in config["attacks"]
    }
    todo = {key: epsilons for key, epsilons in todo.items() if epsilons}
    targets = {name: as_ensemble(model) for name, model in trained.items()}  # one gradient cache each
    batch_size = min(len(data.x_test), 1024)
    with tqdm(total=sum(map(len, todo.values())), desc="attacks", unit="eps", disable=not progress) as bar:
        for (name, attack), epsilons in todo.items():
            options = {"steps": config["pgd_steps"], "seed": config["seed"]} if attack == "pgd" else {}
            curve = robustness_curve(
                targets[name], data.x_test, data.y_test, attack=attack, epsilons=epsilons,
                batch_size=batch_size, clip_values=(0.0, 1.0), **options,
            )  # fmt: skip
            state["results"] += [
                {"model": name, "attack": attack, "eps": e, "accuracy": a}
                for e, a in zip(epsilons, curve["accuracy"])
            ]
            _write_json(state, os.path.join(out, "results.json"))
            bar.update(len(epsilons))


def _write_outputs(state, out):
    """results.json (rows and models in a fixed order, whatever was resumed), results.csv, the plots."""
    import gradkit

    order = {key: i for i, key in enumerate(MODELS + tuple(state["config"]["attacks"]))}
    state["results"].sort(key=lambda r: (order[r["model"]], order[r["attack"]], r["eps"]))
    for key in ("models", "grad_norm"):
        state[key] = {name: state[key][name] for name in MODELS}
    _write_json(state, os.path.join(out, "results.json"))

    def write_csv(f):
        writer = csv.DictWriter(f, fieldnames=["model", "attack", "eps", "accuracy"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(state["results"])

    _write_text(os.path.join(out, "results.csv"), write_csv)
    title = f"{state['dataset']}, Keras backend {state['backend']}"
    gradkit.plot_robustness(
        state["results"], os.path.join(out, "robustness.png"), title=f"Robustness - {title}"
    )
    gradkit.plot_grad_norm(
        state["grad_norm"], os.path.join(out, "grad_norm.png"), title=f"Gradient norm - {title}"
    )


def format_table(state):
    """The study's results as text: one block per attack, models x epsilons, and the backend used.

    Args:
        state: the dict `run_study` returns (or results.json loaded).

    Returns:
        str, one line per model and attack, accuracies with 3 decimals.
    """
    config = state["config"]
    epsilons = config["epsilons"]
    width = max(len(name) for name in MODELS) + 2
    lines = [
        f"gradkit study - Keras backend: {state['backend']} - data: {state['dataset']} "
        f"({state['n_train']} train / {state['n_test']} test, model {config['model']})",
        "clean accuracy: " + ", ".join(f"{n} {state['models'][n]['clean_accuracy']:.3f}" for n in MODELS),
    ]
    rows = {(r["model"], r["attack"], r["eps"]): r["accuracy"] for r in state["results"]}
    for attack in config["attacks"]:
        lines.append("")
        lines.append(
            f"{attack + ' accuracy':<{width}}" + "".join(f"{'eps=' + f'{e:g}':>10}" for e in epsilons)
        )
        for name in MODELS:
            cells = (rows.get((name, attack, e)) for e in epsilons)
            lines.append(
                f"{name:<{width}}" + "".join(f"{'-' if c is None else f'{c:.3f}':>10}" for c in cells)
            )
    return "\n".join(lines)


# Configuration and files ------------------------------------------------------------------------


class ConfigError(ValueError):
    """A study option or output directory that cannot be used; the message says what to change."""


def make_config(**options):
    """The full, validated study configuration: `DEFAULTS`, then `QUICK` if `quick`, then `options`.

    Args:
        **options: any of `DEFAULTS`' keys; None means "the default". `out`: output directory (str);
            `dataset`: "digits", "mnist" or a ".npz" path; `model`: "cnn" or "mlp"; `epsilons`:
            non-empty sequence of finite numbers >= 0 (input units, inputs lie in [0, 1]), sorted and
            deduplicated; `attacks`: non-empty subset of "fgsm", "pgd"; `n_estimators`, `epochs`
            (per member), `batch_size`, `pgd_steps`: ints >= 1; `seed`: int >= 0; `adv_eps`: the FGSM
            eps of adversarial boosting, a finite number >= 0; `quick`: bool (2 members of 3 epochs,
            epsilons 0, 0.1, 0.3, at most 2,000/1,000 train/test samples).

    Returns:
        dict with every key of `DEFAULTS`, in that order.

    Raises:
        ConfigError: an unknown key or a value outside the ranges above.
    """
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"Unknown study options {unknown}. Known: {sorted(DEFAULTS)}")
    quick = options.get("quick") or False
    if not isinstance(quick, bool):
        raise ConfigError(f"`quick` must be True or False. Received: quick={quick!r}")
    given = {k: v for k, v in options.items() if v is not None}
    config = {**DEFAULTS, **(QUICK if quick else {}), **given, "quick": quick}
    for key in ("out", "dataset"):
        if not isinstance(config[key], (str, os.PathLike)) or not os.fspath(config[key]):
            raise ConfigError(f"`{key}` must be a non-empty path or name. Received: {key}={config[key]!r}")
        config[key] = os.fspath(config[key])
    datasets.check_name(config["dataset"])
    if config["model"] not in ("cnn", "mlp"):
        raise ConfigError(f'`model` must be "cnn" or "mlp". Received: model={config["model"]!r}')
    config["epsilons"] = _numbers(config["epsilons"], "epsilons")
    attacks = config["attacks"]
    if isinstance(attacks, str) or not attacks or any(a not in ("fgsm", "pgd") for a in attacks):
        raise ConfigError(
            f'`attacks` must be a non-empty list of "fgsm", "pgd". Received: attacks={attacks!r}'
        )
    config["attacks"] = list(dict.fromkeys(attacks))
    for key, low in _MINIMUM.items():
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ConfigError(f"`{key}` must be an integer >= {low}. Received: {key}={value!r}")
        config[key] = int(value)
    config["adv_eps"] = _numbers([config["adv_eps"]], "adv_eps")[0]
    return config


def _numbers(values, name):
    """Sorted unique floats; each must be a finite number >= 0."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or not len(values):
        raise ConfigError(f"`{name}` must be a non-empty list of numbers >= 0. Received: {name}={values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"`{name}` must hold finite numbers >= 0. Received: {name}={list(values)!r}")
    return sorted({float(v) for v in values})


def _check_out(out, config, backend):
    """Raises ConfigError unless `out` can hold this study; reads only, writes nothing."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"`out` must be a directory. Received: out={out!r}, which is a file")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"`out` must be a writable directory. Received: out={out!r} ({parent!r} is not writable)"
        )
    meta = _read_json(os.path.join(out, "config.json"))
    if meta is None:
        if os.path.isdir(out) and any(not f.startswith(".") for f in os.listdir(out)):
            raise ConfigError(
                f"`out` holds files but no config.json of a gradkit study: use a new or empty directory. "
                f"Received: out={out!r}"
            )
        return
    if meta.get("backend") != backend:
        raise ConfigError(
            f"{out!r} holds a study run with the Keras backend {meta.get('backend')!r}, not {backend!r}: "
            "rerun with that KERAS_BACKEND to resume it, or use another --out."
        )
    old = meta.get("config") or {}
    changed = [f"{k}: {old.get(k)!r} -> {config[k]!r}" for k in config if old.get(k) != config[k]]
    if changed:
        raise ConfigError(
            f"{out!r} holds a study with another configuration ({'; '.join(changed)}). A rerun resumes "
            "only with the same options: repeat them, or use another --out."
        )


def _open_out(out, config, backend, fingerprint):
    """Creates `out`, writes config.json on first use, and returns the saved state (or a fresh one)."""
    path = os.path.join(out, "config.json")
    try:
        os.makedirs(out, exist_ok=True)
        meta = _read_json(path)
        if meta is None:
            _write_json({"config": config, "backend": backend, "data_sha256": fingerprint}, path)
    except OSError as err:
        raise ConfigError(f"`out` must be a writable directory. Received: out={out!r} ({err})") from err
    if meta is not None and meta.get("data_sha256") != fingerprint:
        raise ConfigError(
            f"{out!r} holds a study of other data (the data set file changed): use another --out."
        )
    fresh = {"config": config, "backend": backend, "dataset": config["dataset"], "n_train": 0, "n_test": 0}
    state = _read_json(os.path.join(out, "results.json")) or {}
    return {
        **fresh,
        "models": state.get("models", {}),
        "results": state.get("results", []),
        "grad_norm": state.get("grad_norm", {}),
    }


def _read_json(path):
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path!r} is unreadable ({err}): remove it or use another --out.") from err


def _write_text(path, write):
    """Writes a text file atomically: `write(f)` gets the open temporary file."""

    def write_text(tmp):
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            write(f)

    write_atomic(path, write_text)


def _write_json(obj, path):
    _write_text(path, lambda f: json.dump(obj, f, indent=2))


def _save_model(model, path):
    """`single.keras` atomically; ensembles through their `save()` (atomic per file)."""
    if isinstance(model, keras.Model):
        write_atomic(path, model.save)
    else:
        model.save(path)


def _load_model(name, path):
    """The saved model, or None (with a warning) when it is missing or cannot be loaded."""
    from gradkit.persistence import load

    try:
        return keras.saving.load_model(path) if name == "single" else load(path)
    except Exception as err:  # noqa: BLE001 - any failure means "train it again"
        warnings.warn(
            f"Could not load the finished model {name!r} from {path!r} ({err}); training it again.",
            stacklevel=2,
        )
        return None
