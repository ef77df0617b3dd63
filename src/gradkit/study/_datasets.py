"""Data sets for `gradkit study`: digits, MNIST, Fashion-MNIST, CIFAR-10 and `.npz` files, in [0, 1].

Every loader returns a `Dataset` of float32 inputs in [0, 1] (the `clip_values` the study's attacks
use) and int64 class ids 0..K-1. Images have the shape `(n, height, width, channels)`; an `.npz` file
may also hold flat feature vectors `(n, d)` (for `--model mlp`). Loading errors are `DatasetError`
(a `ValueError`) with a message that says what was expected.

References:
    Alpaydin & Kaynak (1998), "Optical Recognition of Handwritten Digits", UCI Machine Learning
    Repository, https://doi.org/10.24432/C50P49 (scikit-learn's `load_digits`).
    LeCun, Bottou, Bengio & Haffner (1998), "Gradient-based learning applied to document
    recognition", Proc. IEEE 86(11), https://doi.org/10.1109/5.726791 (MNIST).
"""

import dataclasses
import os

import numpy as np

from gradkit.study import _keras_data

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
KERAS_DATASETS = tuple(_keras_data.LOADERS)  # loaded through keras.datasets


class DatasetError(ValueError):
    """A data set that cannot be loaded or has the wrong content; the message says what to fix."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A train/test split.

    Attributes:
        name: "digits", "mnist" or the `.npz` path as given.
        x_train, x_test: float32 `(n, h, w, c)` images or `(n, d)` features, values in [0, 1].
        y_train, y_test: int64 class ids `(n,)` in [0, n_classes).
        n_classes: K, 1 + the largest class id (at least 2); every id 0..K-1 occurs in y_train.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int


def load_dataset(name, *, test_size=0.25, seed=0):
    """Loads the data set `name`: "digits", "mnist", "fashion_mnist", "cifar10", or a path ending in ".npz".

    Args:
        name: "digits" (scikit-learn's 1,797 8x8 digits, no download); "mnist", "fashion_mnist"
            (60,000/10,000 28x28x1 images) or "cifar10" (50,000/10,000 32x32x3 images) through
            `keras.datasets` (downloaded once to ~/.keras/datasets, see `load_keras`); or a `.npz`
            path (see `load_npz`).
        test_size: fraction of the digits held out for testing, in (0, 1). Defaults to 0.25.
        seed: int >= 0, seed of the stratified digits split. Defaults to 0.

    Returns:
        A `Dataset`.

    Raises:
        DatasetError: an unknown name, a Keras data set unavailable (offline and not cached), or a
            bad `.npz`.
    """
    name = check_name(name)
    if name == "digits":
        return load_digits(test_size=test_size, seed=seed)
    if name in KERAS_DATASETS:
        return load_keras(name)
    return load_npz(name)


def load_keras(name):
    """ "mnist", "fashion_mnist" or "cifar10" through `keras.datasets` (see `_keras_data.read`), scaled
    by 1/255; grey images get a channel axis: `(n, 28, 28, 1)` or `(n, 32, 32, 3)`, labels `(n,)`.

    Raises:
        DatasetError: the loader failed (typically offline with no cached copy in ~/.keras/datasets).
    """
    try:
        arrays = _keras_data.read(name)
    except _keras_data.Unavailable as err:
        raise DatasetError(str(err)) from err.__cause__
    return _make(name, *arrays)


def load_mnist():
    """MNIST through `keras.datasets.mnist.load_data()`, scaled by 1/255, images `(n, 28, 28, 1)`.

    Raises:
        DatasetError: the loader failed (typically offline with no cached copy in ~/.keras/datasets).
    """
    return load_keras("mnist")


def check_name(name):
    """`name` as a str if it is "digits", in `KERAS_DATASETS` or a path ending in .npz; else DatasetError."""
    if isinstance(name, (str, os.PathLike)):
        name = os.fspath(name)
        if name == "digits" or name in KERAS_DATASETS or name.endswith(".npz"):
            return name
    raise DatasetError(
        '`dataset` must be "digits", "mnist", "fashion_mnist", "cifar10" or a path to a .npz file. '
        f"Received: dataset={name!r}"
    )


def load_digits(*, test_size=0.25, seed=0):
    """scikit-learn's digits (8x8 images, 10 classes) scaled by 1/16 to [0, 1], split stratified.

    Args:
        test_size: fraction held out for testing, in (0, 1). Defaults to 0.25.
        seed: int >= 0, `random_state` of `sklearn.model_selection.train_test_split`. Defaults to 0.

    Returns:
        A `Dataset` with images `(n, 8, 8, 1)`; with the defaults 1,347 train and 450 test samples.
    """
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    digits = sk_load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_size, stratify=y, random_state=seed
    )
    return Dataset("digits", x_train, y_train, x_test, y_test, 10)


def load_npz(path):
    """Loads a `.npz` file holding the arrays `x_train`, `y_train`, `x_test`, `y_test`.

    `x_*`: `(n, h, w)` or `(n, h, w, c)` images or `(n, d)` features, the same feature shape in both;
    uint8 values are divided by 255, any other numeric dtype must already lie in [0, 1]. `y_*`: class
    ids `(n,)` (integers >= 0) or one-hot rows `(n, K)`; at least two classes in `y_train`.

    Raises:
        DatasetError: a missing or unreadable file, missing keys, object arrays, mismatched lengths or
            feature shapes, values outside [0, 1], NaN or inf, bad labels.
    """
    if not os.path.isfile(path):
        raise DatasetError(f"`dataset` file does not exist. Received: dataset={path!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in NPZ_KEYS if k not in data.files]
            if missing:
                raise DatasetError(
                    f"{path!r} must hold the arrays {list(NPZ_KEYS)}; missing {missing} (has {data.files})."
                )
            arrays = {k: data[k] for k in NPZ_KEYS}
    except DatasetError:
        raise
    except Exception as err:  # noqa: BLE001 - zip, pickle and format errors all mean "unreadable"
        why = str(err)
        if "Object arrays" in why:
            why = "it holds object arrays; save numeric arrays only"
        elif "pickle" in why:
            why = "it is no zip of arrays (a text or pickle file renamed .npz?); write it with np.savez"
        raise DatasetError(f"{path!r} is not a readable .npz file of numeric arrays: {why}") from err
    return _make(path, *(arrays[k] for k in NPZ_KEYS))


def _make(name, x_train, y_train, x_test, y_test):
    x_train, x_test = _check_x(x_train, "x_train"), _check_x(x_test, "x_test")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DatasetError(
            "`x_train` and `x_test` must have the same feature shape. "
            f"Received: x_train.shape={x_train.shape}, x_test.shape={x_test.shape}"
        )
    y_train = _check_y(y_train, len(x_train), "y_train")
    y_test = _check_y(y_test, len(x_test), "y_test")
    if len(np.unique(y_train)) < 2:
        classes = np.unique(y_train).tolist()
        raise DatasetError(f"`y_train` must hold at least two classes. Received: classes {classes}")
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    missing = sorted(set(range(n_classes)) - set(np.unique(y_train).tolist()))
    if missing:
        raise DatasetError(
            f"Class ids must run from 0 to {n_classes - 1} with every class in `y_train` (boosting "
            f"learns the classes from it). Classes missing from y_train: {missing[:10]}"
        )
    return Dataset(name, x_train, y_train, x_test, y_test, n_classes)


def _check_x(x, name):
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool) or x.ndim not in (2, 3, 4) or len(x) == 0:
        raise DatasetError(
            f"`{name}` must be a non-empty numeric array (n, d), (n, h, w) or (n, h, w, c). "
            f"Received: shape={x.shape}, dtype={x.dtype}"
        )
    x = x.astype(np.float32) / np.float32(255) if x.dtype == np.uint8 else x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise DatasetError(f"`{name}` contains NaN or inf.")
    if x.min() < 0 or x.max() > 1:
        raise DatasetError(
            f"`{name}` must lie in [0, 1] (uint8 is divided by 255; scale other data yourself). "
            f"Received: min={float(x.min())}, max={float(x.max())}"
        )
    return x[..., None] if x.ndim == 3 else x


def _check_y(y, n, name):
    if not np.issubdtype(y.dtype, np.number) or len(y) != n or y.ndim not in (1, 2):
        raise DatasetError(
            f"`{name}` must hold {n} class ids (n,) or one-hot rows (n, K), one per sample. "
            f"Received: shape={y.shape}, dtype={y.dtype}"
        )
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim == 2:
        if not (np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1)):
            raise DatasetError(f"`{name}` of shape {y.shape} must be one-hot rows (one 1 per row, else 0).")
        y = y.argmax(axis=1)
    if not np.all(np.isfinite(y)) or np.any(y < 0) or np.any(y != np.round(y)):
        raise DatasetError(
            f"`{name}` must hold integer class ids >= 0. Received: min={y.min()}, max={y.max()}"
        )
    return y.astype(np.int64)


def subsample(data, n_train, n_test, *, seed=0):
    """A stratified subset of at most `n_train` training and `n_test` test samples (for `--quick`).

    Args:
        data: a `Dataset`.
        n_train, n_test: ints >= 1, the most samples to keep of each split.
        seed: int >= 0, `random_state` of the stratified draw. Defaults to 0.

    Returns:
        A `Dataset` (the same arrays where a split is already small enough).
    """
    from sklearn.model_selection import train_test_split

    def take(x, y, n):
        if len(x) <= n:
            return x, y
        strat = y if np.bincount(y).min(initial=n) >= 2 else None
        x, _, y, _ = train_test_split(x, y, train_size=n, stratify=strat, random_state=seed)
        return x, y

    x_train, y_train = take(data.x_train, data.y_train, n_train)
    x_test, y_test = take(data.x_test, data.y_test, n_test)
    return dataclasses.replace(data, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
