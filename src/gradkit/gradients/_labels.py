"""Labels and sample weights in the forms gradkit accepts, checked and turned into canonical form."""

import numpy as np


def check_labels(y, n, n_classes, spec, name="y", *, fit_targets=False):
    """Validates labels for `spec` and returns them in canonical form.

    Classification losses take class ids `(n,)` (or `(n, 1)`) or one-hot rows `(n, n_classes)`; both
    are returned as int32 ids of shape `(n,)`. Soft probability vectors are rejected: the cross-entropy
    of a distribution with itself has a zero gradient, so an attack would silently do nothing. Binary
    cross-entropy takes one 0/1 label per sample on a one-unit output; on a k-unit output (multi-label
    targets, or softmax units compiled with binary cross-entropy) it is refused, since input gradients
    and attacks need one true class per sample. Other losses get a float32 array, unchanged in shape.

    With `fit_targets=True` (weight gradients, which take what `fit` takes), binary cross-entropy
    targets are any finite floats of the output's shape `(n, k)` (multi-label and soft targets; `(n,)`
    for one unit), returned as float32 `(n, k)`, and categorical cross-entropy also takes soft rows
    `(n, n_classes)`, returned unchanged as float32.

    Raises:
        ValueError: wrong length, soft or out-of-range labels, multi-label targets for input
            gradients, NaN or inf.
        TypeError: `y` is not array-like.
    """
    arr = np.asarray(y)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"`{name}` must be a numeric array. Received: {name} of dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[0] != n:
        raise ValueError(f"`{name}` must have one row per sample ({n}). Received: {name}.shape={arr.shape}")
    if not np.all(np.isfinite(arr.astype(np.float64))):
        raise ValueError(f"`{name}` contains NaN or inf.")
    if not spec.is_classification:
        return arr.astype(np.float32)
    if spec.kind == "binary":
        return _fit_binary(arr, n, n_classes, name) if fit_targets else _binary_ids(arr, n, n_classes, name)
    if arr.ndim == 2 and arr.shape[1] == n_classes and n_classes > 1:
        ones = arr == 1
        if np.all(ones | (arr == 0)) and np.all(ones.sum(axis=1) == 1):
            return arr.argmax(axis=1).astype(np.int32)
        if fit_targets and spec.kind == "categorical":
            return arr.astype(np.float32)
        raise ValueError(
            f"`{name}` looks like soft probability vectors: labels must be class ids of shape "
            f"(n,) or one-hot rows of shape (n, {n_classes}). The cross-entropy of a "
            "distribution with itself has zero gradient, so attacks would do nothing."
        )
    return _class_ids(arr, n, n_classes, name, getattr(spec, "ignore_class", None))


def _fit_binary(arr, n, units, name):
    flat = arr.reshape(n, -1)
    if flat.shape[1] != 1 and units and flat.shape[1] != units:
        raise ValueError(
            f"Binary cross-entropy targets `{name}` must have the output's shape (n, {units}) (or (n,) for "
            f"one unit). Received: {name}.shape={arr.shape}"
        )
    return flat.astype(np.float32)


def _binary_ids(arr, n, units, name):
    if units > 1 or arr.reshape(n, -1).shape[1] != 1:
        raise ValueError(
            "Input gradients and attacks support single-label classifiers (class ids with sparse or "
            "categorical cross-entropy, one 0/1 label per sample with binary cross-entropy on one "
            "sigmoid unit) and regression losses; binary cross-entropy on a k-unit output (multi-label "
            f"targets) is not supported. Received: {name}.shape={arr.shape} for an output of "
            f"{units or 'unknown'} units. For softmax units compiled with binary_crossentropy, pass "
            "loss='categorical_crossentropy'; weight gradients (weight_gradients, gradient_norm) "
            "take multi-label targets."
        )
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"Binary labels `{name}` must be 0 or 1.")
    return arr.reshape(n, -1).astype(np.int32)[:, 0]


def _class_ids(arr, n, n_classes, name, ignore_class=None):
    flat = arr.reshape(n, -1)
    if flat.shape[1] != 1:
        raise ValueError(
            f"`{name}` must hold class ids of shape (n,) or one-hot rows of shape (n, {n_classes}). "
            f"Received: {name}.shape={arr.shape}"
        )
    fractional = np.flatnonzero(flat[:, 0] != np.round(flat[:, 0]))
    if fractional.size:
        i = int(fractional[0])
        raise ValueError(
            f"`{name}` must hold integer class ids. Received: {fractional.size} non-integer value(s), "
            f"the first {name}[{i}]={flat[i, 0]!r}"
        )
    ids = flat[:, 0].astype(np.int64)
    kept = (
        ids if ignore_class is None else ids[ids != ignore_class]
    )  # the loss's ignored class may lie outside
    if kept.size and (kept.min() < 0 or (n_classes and kept.max() >= n_classes)):  # n_classes 0: unknown
        raise ValueError(
            f"`{name}` holds class ids outside [0, {n_classes - 1}]. "
            f"Received: min={kept.min()}, max={kept.max()}"
        )
    return ids.astype(np.int32)


def labels_for_loss(ids, spec, n_classes):
    """Canonical ids -> the label form the Keras loss function expects (ids, one-hot, 0/1 column)."""
    if spec.kind == "categorical":
        return np.eye(n_classes, dtype=np.float32)[ids]
    if spec.kind == "binary":
        return ids.astype(np.float32)[:, None]
    return ids


def check_sample_weight(sample_weight, n, name="sample_weight"):
    """Returns float32 weights of shape (n,): ones when None; finite and >= 0 otherwise."""
    if sample_weight is None:
        return np.ones(n, np.float32)
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"`{name}` must have shape ({n},). Received: {name}.shape={w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"`{name}` must be finite and >= 0.")
    return w.astype(np.float32)
