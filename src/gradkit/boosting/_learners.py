"""The weak learners of boosting: what they must be, their predicted ids, their targets.

A learner is a compiled Keras classifier with one output (K units, or 1 sigmoid unit when K = 2), or
any object with `fit(x, y, sample_weight=...)` and `predict(x)` returning class ids 0..K-1 (checked on
every call: labels `(n,)` among its `classes_`, not probabilities).
"""

import inspect

import keras
import numpy as np
from sklearn.base import BaseEstimator

from gradkit.gradients import predict_classes, resolve_loss

PREDICT_BATCH = 256


def is_keras(learner):
    """True for a Keras model (gradient-based features need one)."""
    return isinstance(learner, keras.Model)


def units(learner, x):
    """Size of the learner's output (its last axis; 1 for a flat output)."""
    outputs = getattr(learner, "outputs", None)
    shape = tuple(outputs[0].shape) if outputs else np.shape(learner.predict(x[:1], verbose=0))
    return int(shape[-1]) if len(shape) > 1 else 1


def _check_keras(learner, x, n_classes):
    if not getattr(learner, "compiled", False):
        raise ValueError("`build_fn` must return a compiled keras.Model: call `model.compile(...)` in it.")
    resolve_loss(None, learner)  # ValueError if compiled without a loss
    if len(getattr(learner, "outputs", None) or [None]) != 1:
        raise ValueError("`build_fn` must return a model with a single output.")
    n_units = units(learner, x)
    if n_units != n_classes and not (n_units == 1 and n_classes == 2):
        raise ValueError(
            f"The model from `build_fn` has {n_units} output units but y has {n_classes} classes: use "
            f"{n_classes} units (or 1 sigmoid unit for 2 classes)."
        )


def check_learner(learner, x, n_classes, adversarial, checkpoint_dir):
    """Raises before any training if a fresh learner cannot be boosted.

    Raises:
        ValueError: a Keras model not compiled, compiled without a loss, with several outputs, or
            with a unit count that does not fit `n_classes`.
        TypeError: neither a Keras model nor an object with `fit(..., sample_weight=...)` and
            `predict`; `adversarial` or `checkpoint_dir` set for learners that are not Keras models.
    """
    if is_keras(learner):
        _check_keras(learner, x, n_classes)
        return
    if not (callable(getattr(learner, "fit", None)) and callable(getattr(learner, "predict", None))):
        raise TypeError(
            "`build_fn` must return a compiled keras.Model or an object with fit(x, y, sample_weight=...) "
            f"and predict(x). Received: {type(learner).__name__}"
        )
    if "sample_weight" not in inspect.signature(learner.fit).parameters:
        raise TypeError(
            f"The learner {type(learner).__name__} from `build_fn` has no `sample_weight` argument in fit(); "
            "boosting needs learners that take sample weights (it would silently run unweighted)."
        )
    if adversarial is not None:
        raise TypeError("`adversarial` needs Keras learners (attacks use input gradients).")
    if checkpoint_dir is not None:
        raise TypeError("`checkpoint_dir` needs Keras learners (members are saved as .keras files).")


def is_sklearn(learner):
    """True for a scikit-learn estimator: it gets the boosting weights exactly as scikit-learn hands them."""
    return isinstance(learner, BaseEstimator)


def predict_ids(learner, x, n_classes=None):
    """Class ids `(n,)` int64 predicted by one learner (1 sigmoid unit: 0/1 at p = 0.5 or logit 0).

    Raises:
        ValueError: a learner that is not a Keras model returns from `predict` something other than
            labels `(n,)` among its `classes_` (or the ids 0..K-1 when it has none).
    """
    if not is_keras(learner):
        return check_predictions(learner, learner.predict(x), len(x), n_classes)
    return predict_classes(learner, x, batch_size=PREDICT_BATCH)


def check_predictions(learner, predicted, n, n_classes=None):
    """`predicted` as int64 ids `(n,)` when it holds labels `(n,)` (or `(n, 1)`): non-negative integers,
    below `n_classes` when given, among the learner's `classes_` when it has them.

    Raises:
        ValueError: anything else (probabilities `(n, K)`, scores, P(class 1) as floats), naming `predict`.
    """
    arr = np.asarray(predicted)
    name = type(learner).__name__
    if arr.shape not in ((n,), (n, 1)):
        hint = " (class probabilities? return the labels, e.g. their argmax)" if arr.ndim == 2 else ""
        raise ValueError(
            f"The learner's `predict` must return class labels of shape ({n},){hint}. "
            f"Received: {name}.predict(x).shape={arr.shape}"
        )
    arr = arr.reshape(n)
    valid = np.zeros(n, bool)
    if np.issubdtype(arr.dtype, np.number) or arr.dtype == bool:
        valid = (arr == np.round(arr)) & (arr >= 0) & (arr < (n_classes or np.inf))
    classes = getattr(learner, "classes_", None)
    if classes is not None:
        valid &= np.isin(arr, np.asarray(classes))
    if not np.all(valid):
        allowed = f"its classes_ {np.asarray(classes).tolist()}" if classes is not None else "class ids"
        raise ValueError(
            f"The learner's `predict` must return class labels, values of {allowed} (boosting fits it on "
            f"the class ids 0..K-1), not probabilities or scores. Received: {name}.predict(x) holds "
            f"{arr[np.flatnonzero(~valid)[0]]!r}"
        )
    return arr.astype(np.int64)


def keras_targets(learner, ids, n_classes, x):
    """Labels in the form the learner's compiled loss takes: a 0/1 column, ids or one-hot rows."""
    if units(learner, x) == 1:
        return ids.astype(np.float32)[:, None]
    if resolve_loss(None, learner).kind == "sparse":
        return ids
    return np.eye(n_classes, dtype=np.float32)[ids]


def architecture(learner):
    """What identifies a learner's architecture: its class, and for a Keras model each layer's class and
    the shapes of its weights (a learner that is not built yet gives its layer classes only)."""
    if not is_keras(learner):
        return (type(learner).__name__,)
    layers = tuple(
        (type(layer).__name__, tuple(tuple(w.shape) for w in layer.weights) if learner.built else ())
        for layer in learner.layers
    )
    return (type(learner).__name__, layers)


def check_same_architecture(learner, members):
    """Raises ValueError when a resumed fit's `build_fn` builds another architecture than the members it
    continues (they would be mixed in one vote)."""
    if not members:
        return
    new, old = architecture(learner), architecture(members[0])
    if is_keras(learner) and is_keras(members[0]) and not learner.built:  # compare layer classes only
        old = (old[0], tuple((name, ()) for name, _ in old[1]))
    if new != old:
        raise ValueError(
            "`build_fn` must build the architecture of the members of the fit it resumes: the resumed "
            f"members are {type(members[0]).__name__} with layers {_names(members[0])}, `build_fn` builds "
            f"{type(learner).__name__} with layers {_names(learner)} (or other weight shapes). Resume with "
            "the build_fn the fit started with, or start a new fit (resume=False, another checkpoint_dir)."
        )


def _names(learner):
    return [type(layer).__name__ for layer in getattr(learner, "layers", [])]
