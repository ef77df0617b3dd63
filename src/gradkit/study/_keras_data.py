"""The data sets of `keras.datasets` the study knows: MNIST, Fashion-MNIST and CIFAR-10.

Each is read through its Keras loader, which downloads it once into `~/.keras/datasets` (or
`$KERAS_HOME/datasets`) and reads it from there afterwards; offline without that cached copy, loading
fails with one clear `DatasetError`.

References:
    LeCun, Bottou, Bengio & Haffner (1998), "Gradient-based learning applied to document
    recognition", Proc. IEEE 86(11), https://doi.org/10.1109/5.726791 (MNIST).
    Xiao, Rasul & Vollgraf (2017), "Fashion-MNIST: a novel image dataset for benchmarking machine
    learning algorithms", https://arxiv.org/abs/1708.07747
    Krizhevsky (2009), "Learning multiple layers of features from tiny images", technical report,
    https://www.cs.toronto.edu/~kriz/cifar.html (CIFAR-10).
"""

# name -> (its usual spelling, what the first use downloads)
LOADERS = {
    "mnist": ("MNIST", "mnist.npz (11 MB)"),
    "fashion_mnist": ("Fashion-MNIST", "four fashion-mnist/*.gz files (30 MB)"),
    "cifar10": ("CIFAR-10", "cifar-10-python.tar.gz (163 MB)"),
}


class Unavailable(OSError):
    """The Keras loader failed; the message says why and what to do."""


def read(name):
    """`(x_train, y_train, x_test, y_test)` from `keras.datasets.<name>.load_data()`, as Keras gives them.

    Shapes and dtypes: uint8 images `(n, 28, 28)` (MNIST, Fashion-MNIST) or `(n, 32, 32, 3)`
    (CIFAR-10); uint8 labels `(n,)` or `(n, 1)` (CIFAR-10). `gradkit.study.load_dataset` scales and
    checks them.

    Args:
        name: one of `LOADERS`.

    Raises:
        Unavailable: the loader failed (typically offline with no cached copy in ~/.keras/datasets).
    """
    import keras

    title, download = LOADERS[name]
    try:
        (x_train, y_train), (x_test, y_test) = getattr(keras.datasets, name).load_data()
    except Exception as err:  # noqa: BLE001 - any download or cache failure gets the same advice
        raise Unavailable(
            f"Could not load {title} with keras.datasets.{name}.load_data(): "
            f"{type(err).__name__}: {err}. The first use downloads {download} into "
            "~/.keras/datasets (or $KERAS_HOME/datasets); offline, copy the files there, or pass "
            "--dataset path/to/file.npz."
        ) from err
    return x_train, y_train, x_test, y_test
