"""Saving and loading boosted ensembles (`AdaBoostM1`, `SAMME`) as a directory.

Layout of a saved directory:

    boost.json                      format name and version, estimator class and parameters, classes_,
                                    estimator_weights_, estimator_errors_, the round count, the boosting
                                    sample weights and data fingerprint (for resume), and the member
                                    files with their SHA-256 digests
    member_000_<sha256[:12]>.keras  one Keras file per round, named after its content

Writes are atomic: every file is written under a temporary name in the same directory, flushed to disk
and moved into place with `os.replace`. Members are written before `boost.json`, and files of an earlier
save are deleted only after the new `boost.json` is in place, so a reader (or a resumed fit) always
sees one complete save, never a partial round. Saving into a directory again writes only the members it
does not hold yet (the per-round checkpoints of `fit(checkpoint_dir=...)`).
"""

import hashlib
import json
import os
import re

import keras
import numpy as np

from gradkit.atomic import write_temporary

FORMAT = "gradkit.boosting"
VERSION = 1
META = "boost.json"
_TMP = ".gradkit-tmp-"
_MEMBER = re.compile(r"member_\d{3,}_[0-9a-f]{12}\.keras")


def to_json(value):
    """JSON text of `value` (tuples as lists, numpy values as Python values); raises TypeError."""

    def default(v):
        if isinstance(v, (np.generic, np.ndarray)):
            return v.tolist()
        if isinstance(v, os.PathLike):
            return os.fspath(v)
        raise TypeError(f"{type(v).__name__} is not JSON serializable")

    return json.dumps(value, sort_keys=True, default=default, allow_nan=False)


def exists(path):
    """True when `path` holds a `boost.json` (a finished save or checkpoint)."""
    return os.path.isfile(os.path.join(os.fspath(path), META))


def _sha256(filename):
    digest = hashlib.sha256()
    with open(filename, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - directories cannot be opened on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _atomic(path, suffix, write):
    """Runs `write(tmp)` on a temporary file in `path`, flushed to disk; returns the temporary name."""
    return write_temporary(path, write, prefix=_TMP, suffix=suffix)


def _write_member(model, path, index):
    tmp = _atomic(path, ".keras", model.save)
    sha = _sha256(tmp)
    name = f"member_{index:03d}_{sha[:12]}.keras"
    os.replace(tmp, os.path.join(path, name))
    return {"file": name, "sha256": sha}


def _write_json(meta, path):
    text = json.dumps(meta, indent=1, sort_keys=True, allow_nan=False)

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    os.replace(_atomic(path, ".json", write), os.path.join(path, META))


def save(estimator, path):
    """Writes a fitted `AdaBoostM1`/`SAMME` to the directory `path` (created if needed), atomically.

    Args:
        estimator: a fitted boosting estimator whose learners are Keras models.
        path: directory (str or path-like). Other files in it are left alone, except gradkit's own
            `member_*.keras` files that the new `boost.json` no longer lists.

    Raises:
        TypeError: learners that are not Keras models (only `.keras` files are written, never pickles).
        ValueError: classes_ or parameters that JSON cannot hold (parameters that are not JSON, such as
            callbacks in `fit_kwargs`, are left out and listed under "unsaved_params").
    """
    members = list(estimator.estimators_)
    if not all(isinstance(m, keras.Model) for m in members):
        raise TypeError(
            f"Only boosted Keras models can be saved; this fit holds {type(members[0]).__name__} learners."
        )
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    known = getattr(estimator, "_checkpoint_files", None) or {}
    reuse = known.get("members", []) if known.get("dir") == os.path.realpath(path) else []
    files = []
    for i, model in enumerate(members):
        if i < len(reuse) and os.path.isfile(os.path.join(path, reuse[i]["file"])):
            files.append(reuse[i])
        else:
            files.append(_write_member(model, path, i))
    params, unsaved = {}, []
    for key, value in estimator.get_params(deep=False).items():
        if key == "build_fn":
            continue
        try:
            params[key] = json.loads(to_json(value))
        except (TypeError, ValueError):
            unsaved.append(key)
    classes = np.asarray(estimator.classes_)
    meta = {
        "format": FORMAT,
        "format_version": VERSION,
        "class": type(estimator).__name__,
        "params": params,
        "unsaved_params": unsaved,
        "classes": classes.tolist(),
        "classes_dtype": classes.dtype.str,
        "n_classes": int(estimator.n_classes_),
        "n_rounds": len(members),
        "members": files,
        "estimator_weights": [float(v) for v in estimator.estimator_weights_],
        "estimator_errors": [float(v) for v in estimator.estimator_errors_],
        "state": {
            "sample_weight": [float(v) for v in estimator._sample_weight],
            "finished": bool(estimator._finished),
            "fingerprint": estimator._fingerprint,
        },
    }
    try:
        to_json(meta["classes"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"classes_ of dtype {classes.dtype} cannot be saved as JSON: {e}") from e
    _write_json(meta, path)
    _fsync_dir(path)
    estimator._checkpoint_files = {"dir": os.path.realpath(path), "members": files}
    listed = {f["file"] for f in files}
    for name in os.listdir(path):
        if (_MEMBER.fullmatch(name) and name not in listed) or name.startswith(_TMP):
            os.remove(os.path.join(path, name))


def _corrupt(path, why):
    return ValueError(f"{path!r} is not a complete gradkit boosting save ({why}); nothing was loaded.")


def _read_meta(path):
    if not os.path.isdir(path):
        raise ValueError(f"`path` must be a directory written by save(). Received: path={path!r}")
    meta_path = os.path.join(path, META)
    if not os.path.isfile(meta_path):
        raise _corrupt(path, f"no {META}: not a boosting save, or a save that never finished")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(path, f"{META} is unreadable: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _corrupt(path, f"{META} is not a {FORMAT} file")
    if meta.get("format_version") != VERSION:
        raise _corrupt(path, f"format_version {meta.get('format_version')!r}, this gradkit reads {VERSION}")
    try:
        n = int(meta["n_rounds"])
        lengths = {len(meta["members"]), len(meta["estimator_weights"]), len(meta["estimator_errors"]), n}
        weights = np.asarray(meta["estimator_weights"], dtype=np.float64)
        ok = (
            lengths == {n}
            and n >= 1
            and len(meta["classes"]) == meta["n_classes"] >= 2
            and np.all(np.isfinite(weights))
            and np.all(weights >= 0)
            and meta["class"] in ("AdaBoostM1", "SAMME")
            and isinstance(meta["params"], dict)
            and isinstance(meta["state"]["sample_weight"], list)
        )
    except (KeyError, TypeError, ValueError) as e:
        raise _corrupt(path, f"{META} lacks or garbles {e}") from e
    if not ok:
        raise _corrupt(path, f"{META} is inconsistent (round counts, classes or weights)")
    for member in meta["members"]:
        name = member.get("file", "") if isinstance(member, dict) else ""
        filename = os.path.join(path, name)
        if not _MEMBER.fullmatch(name) or not os.path.isfile(filename):
            raise _corrupt(path, f"member file {name!r} is missing")
        if _sha256(filename) != member.get("sha256"):
            raise _corrupt(path, f"member file {name!r} does not match its SHA-256 in {META}")
    return meta


def load(path, *, safe_mode=True):
    """Loads a boosting estimator written by `save()` / `fit(checkpoint_dir=...)`.

    Args:
        path: the saved directory.
        safe_mode: passed to `keras.saving.load_model`: True (default) refuses members that would run
            arbitrary Python code when loaded, such as `Lambda` layers holding a Python lambda. Pass
            False only for files you trust.

    Returns:
        A fitted `AdaBoostM1` or `SAMME` whose predictions equal the saved one's bit for bit. Its
        `build_fn` is None (set it with `set_params(build_fn=...)` to fit more rounds).

    Raises:
        ValueError: a missing, partial or corrupt directory (no or unreadable `boost.json`, a wrong
            format version, missing members, a member whose SHA-256 does not match), or a member Keras
            refuses in safe mode. Nothing is returned half-loaded.
    """
    from gradkit import boosting

    path = os.fspath(path)
    meta = _read_meta(path)
    models = []
    for member in meta["members"]:
        filename = os.path.join(path, member["file"])
        try:
            models.append(keras.saving.load_model(filename, safe_mode=safe_mode))
        except Exception as e:  # noqa: BLE001 - any failure means nothing is returned
            hint = " Pass safe_mode=False to gradkit.load only if you trust the files." if safe_mode else ""
            raise ValueError(f"Could not load member {member['file']!r} of {path!r}: {e}{hint}") from e
    cls = getattr(boosting, meta["class"])
    params = {k: v for k, v in meta["params"].items() if k in cls._get_param_names() and k != "build_fn"}
    estimator = cls(build_fn=None, **params)
    estimator.estimators_ = models
    estimator.estimator_weights_ = np.asarray(meta["estimator_weights"], dtype=np.float64)
    estimator.estimator_errors_ = np.asarray(meta["estimator_errors"], dtype=np.float64)
    estimator.classes_ = np.asarray(meta["classes"], dtype=np.dtype(meta["classes_dtype"]))
    estimator.n_classes_ = int(meta["n_classes"])
    estimator._sample_weight = np.asarray(meta["state"]["sample_weight"], dtype=np.float64)
    estimator._finished = bool(meta["state"]["finished"])
    estimator._fingerprint = meta["state"]["fingerprint"]
    estimator._checkpoint_files = {"dir": os.path.realpath(path), "members": meta["members"]}
    return estimator
