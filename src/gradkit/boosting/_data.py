"""The training data of a boosting fit: checks, class ids, initial weights and a fingerprint."""

import hashlib

import numpy as np


def check_data(x, y, sample_weight):
    """`(x, ids, classes, w0)`: the data as numpy, class ids, the classes and normalized weights.

    Args:
        x: numeric array `(n, ...)`, n >= 1, without NaN or inf.
        y: class labels `(n,)` (or `(n, 1)`) of any sortable type, at least two distinct, or one-hot
            rows `(n, C)` (read as class ids 0..C-1).
        sample_weight: `(n,)` finite weights >= 0, not all zero, or None for uniform weights.

    Returns:
        `x` as an array; `ids` int64 `(n,)` indices into `classes` (`np.unique(y)`); `w0` float64
        `(n,)` summing to 1.

    Raises:
        ValueError: any of the above does not hold.
    """
    x = np.asarray(x)
    if x.ndim < 2 or x.shape[0] == 0 or not np.issubdtype(x.dtype, np.number):
        raise ValueError(
            f"`x` must be a non-empty numeric array of shape (n, ...). Received: shape {x.shape}"
        )
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        raise ValueError("`x` contains NaN or inf.")
    y = _labels(np.asarray(y), x.shape[0])
    classes, ids = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"`y` must hold at least two classes. Received: classes={classes.tolist()}")
    w = np.ones(x.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (x.shape[0],) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"`sample_weight` must be ({x.shape[0]},) finite, >= 0, not all zero.")
    return x, ids.astype(np.int64), classes, w / w.sum()


def _labels(y, n):
    """Labels `(n,)`: a column `(n, 1)` is flattened and one-hot rows `(n, C)` become class ids, as the
    attacks accept them; anything else 2-D raises a ValueError that says how to convert it."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    elif y.ndim == 2 and y.shape[0] == n and np.issubdtype(y.dtype, np.number):
        if np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1):
            return y.argmax(axis=1)
        raise ValueError(
            f"`y` must be class labels of shape ({n},) or one-hot rows. Received: y.shape={y.shape} with "
            "rows that are not one-hot (soft labels?): pass y.argmax(axis=1) for the most likely class."
        )
    if y.shape != (n,):
        raise ValueError(f"`y` must be class labels of shape ({n},). Received: y.shape={y.shape}")
    return y


def fingerprint(x, ids, weights, classes):
    """Hex SHA-256 of the data, the class ids, the initial weights and the classes (dtypes and shapes
    included): a resumed fit must see the same. Saved in checkpoints: do not change the recipe."""
    digest = hashlib.sha256()
    for a in (np.ascontiguousarray(x), ids, weights, np.asarray(classes).astype(str)):
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()
