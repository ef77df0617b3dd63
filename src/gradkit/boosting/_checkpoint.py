"""A fitted boosting estimator as `(meta, members)` and back, over the file format of `_persistence`.

`meta` keys (besides the format's own): `class` (the estimator's class name), `params` (its JSON-able
parameters, `build_fn` left out), `unsaved_params` (those JSON cannot hold), `classes`,
`classes_dtype`, `n_classes`, `estimator_weights`, `estimator_errors`, and `state` (`sample_weight`,
`finished`, `fingerprint`: what `fit(..., resume=True)` continues from; `stop_reason`: why boosting
stopped early, or null).
"""

import json
import warnings

import keras
import numpy as np

from gradkit import _io
from gradkit.boosting import _persistence

# The fitted state a resumed fit takes over (from a checkpoint or from the estimator itself).
STATE = (
    "estimators_ estimator_weights_ estimator_errors_ classes_ n_classes_ _sample_weight _finished "
    "_fingerprint _checkpoint_files"
).split()
RESUME_PARAMS = ("learning_rate", "random_state", "adversarial", "fit_kwargs")


def _params(estimator):
    params, unsaved = {}, []
    for key, value in estimator.get_params(deep=False).items():
        if key == "build_fn":
            continue
        try:
            params[key] = json.loads(_io.to_json(value, sort_keys=True))
        except (TypeError, ValueError):
            unsaved.append(key)
    return params, unsaved


def to_state(estimator):
    """`(meta, members)` of a fitted estimator whose learners are Keras models.

    Raises:
        TypeError: learners that are not Keras models (only `.keras` files are written, never pickles).
        ValueError: classes_ that JSON cannot hold (parameters that are not JSON, such as callbacks
            in `fit_kwargs`, are left out and listed under "unsaved_params").
    """
    members = list(estimator.estimators_)
    if not all(isinstance(m, keras.Model) for m in members):
        raise TypeError(
            f"Only boosted Keras models can be saved; this fit holds {type(members[0]).__name__} learners."
        )
    params, unsaved = _params(estimator)
    classes = np.asarray(estimator.classes_)
    try:
        _io.to_json(classes.tolist())
    except (TypeError, ValueError) as e:
        raise ValueError(f"classes_ of dtype {classes.dtype} cannot be saved as JSON: {e}") from e
    meta = {
        "class": type(estimator).__name__,
        "params": params,
        "unsaved_params": unsaved,
        "classes": classes.tolist(),
        "classes_dtype": classes.dtype.str,
        "n_classes": int(estimator.n_classes_),
        "estimator_weights": [float(v) for v in estimator.estimator_weights_],
        "estimator_errors": [float(v) for v in estimator.estimator_errors_],
        "state": {
            "sample_weight": [float(v) for v in estimator._sample_weight],
            "finished": bool(estimator._finished),
            "fingerprint": estimator._fingerprint,
            "stop_reason": getattr(estimator, "stop_reason_", None),
        },
    }
    return meta, members


def save(estimator, path):
    """Writes a fitted estimator to the directory `path` (see `_persistence.write`), atomically."""
    meta, members = to_state(estimator)
    previous = getattr(estimator, "_checkpoint_files", None)
    estimator._checkpoint_files = _persistence.write(path, meta, members, previous=previous)


def is_consistent(meta, class_names=None):
    """True when the estimator keys of `meta` agree (KeyError/TypeError/ValueError when garbled)."""
    n = int(meta["n_rounds"])
    lengths = {len(meta["estimator_weights"]), len(meta["estimator_errors"]), n}
    weights = np.asarray(meta["estimator_weights"], dtype=np.float64)
    return (
        lengths == {n}
        and len(meta["classes"]) == meta["n_classes"] >= 2
        and bool(np.all(np.isfinite(weights)))
        and bool(np.all(weights >= 0))
        and (class_names is None or meta["class"] in class_names)
        and isinstance(meta["params"], dict)
        and isinstance(meta["state"]["sample_weight"], list)
    )


def from_state(cls, meta, members, path):
    """A fitted `cls` from `meta` and its loaded members; its `build_fn` is None."""
    names = set(cls._get_param_names()) - {"build_fn"}
    estimator = cls(build_fn=None, **{k: v for k, v in meta["params"].items() if k in names})
    estimator.estimators_ = list(members)
    estimator.estimator_weights_ = np.asarray(meta["estimator_weights"], dtype=np.float64)
    estimator.estimator_errors_ = np.asarray(meta["estimator_errors"], dtype=np.float64)
    estimator.classes_ = np.asarray(meta["classes"], dtype=np.dtype(meta["classes_dtype"]))
    estimator.n_classes_ = int(meta["n_classes"])
    estimator._sample_weight = np.asarray(meta["state"]["sample_weight"], dtype=np.float64)
    estimator._finished = bool(meta["state"]["finished"])
    estimator._fingerprint = meta["state"]["fingerprint"]
    estimator.stop_reason_ = meta["state"].get("stop_reason")  # absent in saves made before it was kept
    estimator._checkpoint_files = _persistence.record(path, meta["members"])
    return estimator


def load(path, classes, *, safe_mode=True):
    """The estimator saved in `path`, its class looked up by name in `classes` (a dict)."""
    meta = _persistence.read_meta(path, lambda m: is_consistent(m, tuple(classes)))
    members = _persistence.read_members(path, meta, safe_mode=safe_mode)
    return from_state(classes[meta["class"]], meta, members, path)


def load_to_resume(estimator, path):
    """The checkpoint in `path` as an estimator of `estimator`'s class, made with the same settings.

    A setting the checkpoint could not save (`fit_kwargs` holding callbacks, which JSON cannot hold)
    cannot be compared: a UserWarning says so, and the fit goes on with the current value.

    Raises:
        ValueError: a checkpoint of another class, or made with another `learning_rate`,
            `random_state`, `adversarial` or `fit_kwargs`; a corrupt checkpoint.
    """
    cls = type(estimator)
    meta = _persistence.read_meta(path, is_consistent)
    if meta["class"] != cls.__name__:
        raise ValueError(f"`checkpoint_dir` holds a {meta['class']} fit, not a {cls.__name__}.")
    restored = from_state(cls, meta, [], path)  # members are loaded once the settings agree
    saved, current = restored.get_params(), estimator.get_params()
    unsaved = set(meta.get("unsaved_params", ()))
    for key in RESUME_PARAMS:
        if key in unsaved:
            warnings.warn(
                f"The checkpoint could not save `{key}` (it holds objects JSON cannot hold, such as "
                f"callbacks), so the resumed fit cannot check that `{key}` is the one the fit started "
                "with; it goes on with the current one.",
                UserWarning,
                stacklevel=4,
            )
            continue
        if _io.to_json(saved.get(key), sort_keys=True) != _json_or_none(current.get(key)):
            raise ValueError(
                f"The checkpoint was made with {key}={saved.get(key)!r}, not {key}={current.get(key)!r}."
            )
    restored.estimators_ = _persistence.read_members(path, meta)
    return restored


def _json_or_none(value):
    """`value` as sorted JSON, or None where JSON cannot hold it (then it differs from any saved value)."""
    try:
        return _io.to_json(value, sort_keys=True)
    except (TypeError, ValueError):
        return None


def resume(estimator, fingerprint):
    """Takes over the state to resume from: the checkpoint in `checkpoint_dir` when there is one, else
    the estimator's own fitted rounds. Returns False when there is none (the fit starts at round 0).

    Raises:
        ValueError: a checkpoint of another class or other settings (see `load_to_resume`), or a fit
            made on other data (`fingerprint`, see `_data.fingerprint`).
    """
    source, path = estimator, estimator.checkpoint_dir
    if path is not None and _persistence.exists(path):
        source = load_to_resume(estimator, path)
    if getattr(source, "_fingerprint", None) is None:
        return False
    if source._fingerprint != fingerprint:
        raise ValueError("Cannot resume: x, y or sample_weight differ from the interrupted fit.")
    for key in STATE:
        setattr(estimator, key, getattr(source, key))
    return True
