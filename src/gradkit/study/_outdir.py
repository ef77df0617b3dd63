"""The output folder of a study: checked before anything runs, matched against its config.json.

    config.json     {"config", "backend", "data_sha256"}: a rerun resumes only if all three match
                    (but for `certify`, which a rerun may add, change or drop: only the certified
                    rows are redone)
    results.json    the state `run_study` returns, rewritten after each model and each curve
    results.csv     the result rows: model, attack, norm, eps, accuracy, ci_low, ci_high (its 95% Wilson
                    interval), n_points (its denominator), scope (worst_case, cumulative, remaining)
    samples.csv     one row per test sample: label, and per model clean correct, the smallest eps
                    that broke it (empty: none did) and the attack that did; with "fmn",
                    "fab" or "ddn", the point's minimal perturbation found in the study's
                    norm (`<model>_fmn_norm`)
    robustness.png  accuracy vs eps, one line per model and attack, the worst case boldest, 95% bands
    grad_norm.png   per-epoch gradient norm, a panel per model (`plot_training_diagnostics`), boosted
                    members labelled
    *.keras, */     the trained models (`_models`)

Every file is written atomically through `gradkit._io` (a temporary file, then `os.replace`).
"""

import csv
import hashlib
import os

import numpy as np

from gradkit import _io
from gradkit.study._config import ConfigError
from gradkit.study._norms import ADV_NORMS

CERTIFIED = "certified"  # the attack name of the certified rows, the key of the per-point certificates

_CSV_FIELDS = ("model", "attack", "norm", "eps", "accuracy", "ci_low", "ci_high", "n_points", "scope")
# options added later, with the value a study made before them had
_ADDED = {"adv_mode": "augment", "deterministic": False, "norm": "linf", "certify": None}
# options a rerun may change: they add to the finished work (certificates of the finished models)
# without redoing any of it; config.json then takes the new value
_MAY_CHANGE = ("certify",)


def fingerprint(data):
    """Hex SHA-256 of a `Dataset`'s four arrays (dtype, shape and bytes): a changed data file shows."""
    digest = hashlib.sha256()
    for a in (data.x_train, data.y_train, data.x_test, data.y_test):
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def read(path):
    """The JSON value in `path`, or None when there is no such file.

    Raises:
        ConfigError: the file exists but cannot be read or parsed.
    """
    try:
        return _io.read_json(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path!r} is unreadable ({err}): remove it or use another --out.") from err


def _check_writable(out):
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"`out` must be a directory. Received: out={out!r}, which is a file")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"`out` must be a writable directory. Received: out={out!r} ({parent!r} is not writable)"
        )


def check_out(out, config, backend):
    """Raises ConfigError unless `out` can hold this study; reads only, writes nothing.

    Args:
        out: the output folder (str); it may not exist yet.
        config: the configuration dict without `out` (`StudyConfig.to_dict(out=False)`).
        backend: the Keras backend's name.
    """
    _check_writable(out)
    meta = read(os.path.join(out, "config.json"))
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
    old = {**_ADDED, **(meta.get("config") or {})}
    if old["norm"] != config.get("norm", "linf"):
        raise ConfigError(
            f"{out!r} holds a study at norm {old['norm']!r} and this run asks for norm {config['norm']!r}: "
            "its eps, results and minimal norms are radii in another norm and cannot be resumed. Rerun "
            f"with --norm {old['norm']} to resume it, or use another --out."
        )
    new = {**_ADDED, **config}
    changed = [
        f"{k}: {old.get(k)!r} -> {new[k]!r}" for k in new if k not in _MAY_CHANGE and old.get(k) != new[k]
    ]
    if changed:
        raise ConfigError(
            f"{out!r} holds a study with another configuration ({'; '.join(changed)}). A rerun resumes "
            "only with the same options: repeat them, or use another --out."
        )


def open_out(out, config, backend, data_sha256):
    """Creates `out`, writes config.json on first use, and returns the saved state (or a fresh one).

    Args:
        out, config, backend: as for `check_out`.
        data_sha256: the data's `fingerprint`.

    Returns:
        dict with "config", "backend", "dataset", "norm", "adv_norm", "n_train", "n_test", "n_classes",
        "models", "results",
        "evaluations", "warnings", "samples" and "grad_norm", the last six as results.json saved them
        (empty on first use).

    Raises:
        ConfigError: `out` cannot be created or written, or it holds a study of other data.
    """
    path = os.path.join(out, "config.json")
    try:
        os.makedirs(out, exist_ok=True)
        meta = read(path)
        if meta is not None and meta.get("data_sha256") != data_sha256:
            raise ConfigError(
                f"{out!r} holds a study of other data (the data set file changed): use another --out."
            )
        if meta is None or (meta.get("config") or {}).get("certify") != config.get("certify"):
            _io.write_json({"config": config, "backend": backend, "data_sha256": data_sha256}, path)
    except OSError as err:
        raise ConfigError(f"`out` must be a writable directory. Received: out={out!r} ({err})") from err
    saved = read(os.path.join(out, "results.json")) or {}
    if (saved.get("config") or {}).get("certify") != config.get("certify"):
        saved = without_certificates(saved)
    return {
        "config": config,
        "backend": backend,
        "dataset": config["dataset"],
        "norm": config["norm"],  # the norm of every eps and minimal norm
        "adv_norm": ADV_NORMS[config["norm"]],  # the norm adversarial training ran at
        "n_train": 0,
        "n_test": 0,
        "n_classes": 0,
        "models": saved.get("models", {}),
        "results": saved.get("results", []),
        "evaluations": saved.get("evaluations", []),
        "warnings": saved.get("warnings", []),
        "samples": saved.get("samples", {}),
        "grad_norm": saved.get("grad_norm", {}),
    }


def without_certificates(saved):
    """`saved` (results.json's content) without its certified rows, check warnings and per-point
    certificates: what a rerun with another `certify` (or none) starts from."""
    saved = dict(saved)
    for key in ("results", "warnings"):
        saved[key] = [r for r in saved.get(key, []) if r.get("attack") != CERTIFIED]
    saved["samples"] = {
        name: {k: v for k, v in record.items() if k != CERTIFIED}
        for name, record in saved.get("samples", {}).items()
    }
    return saved


def write_state(state, out):
    """Writes `state` to `out`/results.json atomically."""
    _io.write_json(state, os.path.join(out, "results.json"))


def write_csv(rows, out):
    """Writes the result rows to `out`/results.csv atomically (header `_CSV_FIELDS`)."""

    def write(f):
        writer = csv.DictWriter(f, fieldnames=_CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    _io.write_text(os.path.join(out, "results.csv"), write)


def sample_rows(state, labels):
    """samples.csv's rows: index, label, then per model `<m>_clean` (0/1), `<m>_eps` (the smallest eps
    at which some attack broke the point, "" if none did) and `<m>_by` ("clean", the attack, or ""),
    and `<m>_fmn_norm` (`<m>_fab_norm`, `<m>_ddn_norm`) where FMN (FAB, DDN) ran (the point's minimal
    perturbation found, in the study's norm; "" if none), and `<m>_certified_up_to` with `--certify` (the
    largest study eps up to which the point is certified at every study eps, 0 for a point only correct
    on itself; "" if misclassified)."""
    rows = [{"index": i, "label": int(y)} for i, y in enumerate(labels)]
    for name, record in state["samples"].items():
        worst = record["broken"]["worst_case"]
        for row, clean, eps, by in zip(rows, record["clean"], worst, record["by"]):
            row.update({f"{name}_clean": int(clean), f"{name}_eps": "" if eps is None else eps})
            row[f"{name}_by"] = by or ""
        for attack, norms in record.get("min_norm", {}).items():
            for row, norm in zip(rows, norms):
                row[f"{name}_{attack}_norm"] = "" if norm is None else norm
        for row, eps in zip(rows, record.get(CERTIFIED, ())):
            row[f"{name}_certified_up_to"] = "" if eps is None else eps
    return rows


def write_samples(state, labels, out):
    """Writes `sample_rows` to `out`/samples.csv atomically."""
    rows = sample_rows(state, labels)

    def write(f):
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    _io.write_text(os.path.join(out, "samples.csv"), write)
