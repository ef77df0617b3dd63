"""The study's data sets (`gradkit.study._datasets`, `_keras_data`): digits, MNIST, Fashion-MNIST and
CIFAR-10 (loaders monkeypatched, no download) and validated .npz files."""

import gzip

import keras
import numpy as np
import pytest

from gradkit import study as datasets
from gradkit.study import DatasetError


def _save(path, **arrays):
    rng = np.random.RandomState(0)
    base = {
        "x_train": rng.rand(20, 4, 4).astype(np.float32),
        "y_train": np.arange(20) % 3,
        "x_test": rng.rand(6, 4, 4).astype(np.float32),
        "y_test": np.arange(6) % 3,
    }
    base.update(arrays)
    base = {k: v for k, v in base.items() if v is not None}
    np.savez(path, **base)
    return str(path)


def test_digits_split_is_stratified_scaled_images():
    data = datasets.load_dataset("digits")
    assert data.name == "digits" and data.n_classes == 10
    assert data.x_train.shape == (1347, 8, 8, 1) and data.x_test.shape == (450, 8, 8, 1)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert data.x_train.min() == 0.0 and data.x_train.max() == 1.0  # pixel values 0..16 divided by 16
    assert np.all(data.x_train * 16 == np.round(data.x_train * 16))
    # stratified: every class's share of the test set is within one sample of 25%
    total = np.bincount(data.y_train) + np.bincount(data.y_test)
    assert np.all(np.abs(np.bincount(data.y_test) - total * 0.25) <= 1)
    again = datasets.load_digits(seed=0)
    np.testing.assert_array_equal(again.y_test, data.y_test)
    assert not np.array_equal(datasets.load_digits(seed=1).y_test, data.y_test)


def test_npz_roundtrip_uint8_scaling_channel_axis_and_one_hot(tmp_path):
    x = np.array([[[0, 255], [51, 102]]] * 4, dtype=np.uint8)  # (4, 2, 2)
    path = _save(
        tmp_path / "d.npz",
        x_train=x,
        y_train=np.eye(3, dtype=np.float32)[[0, 1, 2, 1]],
        x_test=x[:2],
        y_test=np.array([[2], [0]]),
    )
    data = datasets.load_dataset(path)
    assert data.name == path and data.n_classes == 3
    assert data.x_train.shape == (4, 2, 2, 1) and data.x_train.dtype == np.float32
    np.testing.assert_allclose(data.x_train[0, :, :, 0], [[0.0, 1.0], [0.2, 0.4]], rtol=1e-6)
    np.testing.assert_array_equal(data.y_train, [0, 1, 2, 1])
    np.testing.assert_array_equal(data.y_test, [2, 0])


def test_npz_flat_features_are_kept(tmp_path):
    rng = np.random.RandomState(1)
    x_train, x_test = rng.rand(10, 5), rng.rand(3, 5)
    path = _save(
        tmp_path / "f.npz", x_train=x_train, x_test=x_test, y_train=np.arange(10) % 2, y_test=[0, 1, 1]
    )
    data = datasets.load_npz(path)
    assert data.x_train.shape == (10, 5) and data.n_classes == 2


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"y_test": None}, "missing ['y_test']"),
        ({"x_train": np.zeros((20, 5, 5))}, "same feature shape"),
        ({"y_train": np.arange(19) % 3}, "`y_train` must hold 20 class ids"),
        ({"x_train": np.full((20, 4, 4), 2.0)}, "must lie in [0, 1]"),
        ({"x_test": np.full((6, 4, 4), np.nan)}, "NaN or inf"),
        ({"y_train": -(np.arange(20) % 3)}, "integer class ids >= 0"),
        ({"y_train": np.arange(20) % 3 + 0.5}, "integer class ids >= 0"),
        ({"y_test": np.full((6, 3), 1 / 3)}, "one-hot"),
        ({"y_train": np.zeros(20, int)}, "at least two classes"),
        ({"y_train": (np.arange(20) % 2) * 2}, "Classes missing from y_train: [1]"),
        ({"y_test": np.full(6, 3)}, "Classes missing from y_train: [3]"),
        ({"x_train": np.zeros((20,))}, "(n, d), (n, h, w) or (n, h, w, c)"),
        ({"x_train": np.array(["a"] * 20)}, "numeric"),
        ({"x_train": np.zeros((0, 4, 4))}, "non-empty"),
    ],
)
def test_npz_validation_errors(tmp_path, arrays, message):
    path = _save(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DatasetError) as info:
        datasets.load_dataset(path)
    assert message in str(info.value)


def test_npz_object_arrays_and_non_files_are_refused(tmp_path):
    np.savez(tmp_path / "obj.npz", x_train=np.array([{}] * 3, dtype=object), y_train=[0, 1, 0],
             x_test=np.zeros((1, 2)), y_test=[0])  # fmt: skip
    with pytest.raises(DatasetError, match="not a readable .npz"):
        datasets.load_npz(str(tmp_path / "obj.npz"))
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(DatasetError, match="not a readable .npz"):
        datasets.load_npz(str(tmp_path / "junk.npz"))
    with pytest.raises(DatasetError, match="does not exist"):
        datasets.load_dataset(str(tmp_path / "missing.npz"))


@pytest.mark.parametrize("name", ["cifar100", "", "data.csv", 3, None])
def test_unknown_dataset_names(name):
    with pytest.raises(DatasetError, match='`dataset` must be "digits", "mnist", "fashion_mnist", "cifar10"'):
        datasets.load_dataset(name)


def test_mnist_offline_gives_a_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", offline)
    with pytest.raises(DatasetError) as info:
        datasets.load_dataset("mnist")
    text = str(info.value)
    assert "Temporary failure" in text and "~/.keras/datasets" in text and "--dataset" in text


def test_mnist_is_scaled_and_gets_a_channel_axis(monkeypatch):
    x = np.full((4, 28, 28), 255, np.uint8)
    x[:, 0, 0] = 0
    y = np.array([2, 1, 0, 1], np.uint8)
    monkeypatch.setattr(keras.datasets.mnist, "load_data", lambda *a, **k: ((x, y), (x[:2], y[:2])))
    data = datasets.load_mnist()
    assert data.x_train.shape == (4, 28, 28, 1) and data.n_classes == 3
    assert data.x_train[0, 0, 0, 0] == 0.0 and data.x_train[0, 1, 1, 0] == 1.0
    np.testing.assert_array_equal(data.y_train, [2, 1, 0, 1])


def test_subsample_is_stratified_and_keeps_small_sets():
    data = datasets.load_digits()
    small = datasets.subsample(data, 500, 100, seed=0)
    assert small.x_train.shape == (500, 8, 8, 1) and len(small.y_test) == 100
    assert np.all(np.abs(np.bincount(small.y_train) - 50) <= 1)
    assert datasets.subsample(data, 5000, 5000).x_train is data.x_train


def _idx(path, header, array):
    """Writes `array` as a gzipped IDX file (the format of Fashion-MNIST's files)."""
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, np.uint8).tobytes())


def test_fashion_mnist_from_the_keras_cache_no_download(tmp_path, monkeypatch):
    from keras.src.backend import config  # where keras.utils.get_file looks for its cache

    folder = tmp_path / "datasets" / "fashion-mnist"
    folder.mkdir(parents=True)
    rng = np.random.RandomState(0)
    for prefix, n in (("train", 12), ("t10k", 5)):
        labels, images = np.arange(n) % 10, rng.randint(0, 256, (n, 28, 28))
        _idx(folder / f"{prefix}-labels-idx1-ubyte.gz", b"\0" * 8, labels)
        _idx(folder / f"{prefix}-images-idx3-ubyte.gz", b"\0" * 16, images)
    monkeypatch.setattr(config, "_KERAS_DIR", str(tmp_path))
    monkeypatch.setattr("urllib.request.urlretrieve", lambda *a, **k: pytest.fail("downloaded"))
    data = datasets.load_dataset("fashion_mnist")
    assert data.name == "fashion_mnist" and data.n_classes == 10
    assert data.x_train.shape == (12, 28, 28, 1) and data.x_test.shape == (5, 28, 28, 1)
    assert data.x_train.dtype == np.float32 and 0 <= data.x_train.min() and data.x_train.max() <= 1
    np.testing.assert_array_equal(data.y_test, np.arange(5))


def test_cifar10_keeps_three_channels_and_flattens_its_labels(monkeypatch):
    # Keras' CIFAR-10 loader needs five full 10,000-image batches: too large to write in a test, so
    # its load_data is replaced by one returning arrays of its shapes and dtypes.
    x = np.random.RandomState(0).randint(0, 256, (20, 32, 32, 3)).astype(np.uint8)
    y = (np.arange(20) % 10).astype(np.uint8)[:, None]
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", lambda: ((x, y), (x[:4], y[:4])))
    data = datasets.load_dataset("cifar10")
    assert data.x_train.shape == (20, 32, 32, 3) and data.y_train.shape == (20,) and data.n_classes == 10
    np.testing.assert_allclose(data.x_train * 255, x, atol=1e-4)
    model = datasets.build_model("cnn", data.x_train.shape[1:], data.n_classes)
    assert model.predict(data.x_test, verbose=0).shape == (4, 10)


@pytest.mark.parametrize("name, title", [("fashion_mnist", "Fashion-MNIST"), ("cifar10", "CIFAR-10")])
def test_keras_datasets_offline_give_a_clear_error(name, title, tmp_path, monkeypatch):
    from keras.src.backend import config

    def offline(*args, **kwargs):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(config, "_KERAS_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr("urllib.request.urlretrieve", offline)
    with pytest.raises(DatasetError) as info:
        datasets.load_dataset(name)
    text = str(info.value)
    assert f"Could not load {title}" in text and "~/.keras/datasets" in text and "--dataset" in text
