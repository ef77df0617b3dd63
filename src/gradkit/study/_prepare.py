"""The study's data: loaded, subsampled with `quick`, trimmed for data parallelism and checked against the
attacks and the model before any training or writing."""

import dataclasses

from gradkit.backend import batch_multiple
from gradkit.study._config import QUICK_SUBSET, ConfigError
from gradkit.study._datasets import load_dataset, subsample
from gradkit.study._models import model_from_function


def prepare_data(config):
    """The data set, subsampled with `quick`, trimmed for data parallelism; checked against the model."""
    data = load_dataset(config.dataset, seed=config.seed)
    if config.quick:
        data = subsample(data, *QUICK_SUBSET, seed=config.seed)
    data = fit_devices(data, config.batch_size)
    if config.model == "cnn" and data.x_train.ndim != 4:
        raise ConfigError(f'`model="cnn"` needs images; {data.name!r} holds flat features: use model="mlp".')
    if "apgd-t" in config.attacks and data.n_classes < 4:  # before any training, not after it
        raise ConfigError(
            f"`attacks` holds 'apgd-t', whose targeted DLR loss needs at least 4 classes; {data.name!r} has "
            f"{data.n_classes}. Use apgd-ce, square or standard (which skips APGD-T there). "
            f"Received: attacks={','.join(config.attacks)}"
        )
    if config.model not in ("cnn", "mlp"):  # your own network: checked once before anything is written
        try:
            model_from_function(config.model, data.x_train.shape[1:], data.n_classes)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    return data


def fit_devices(data, batch_size):
    """Under data parallelism (`gradkit study --devices N`, JAX), Keras needs every training batch to
    split evenly over the N devices: the batch size must be a multiple of N, and the last
    `n_train % N` training rows are dropped (a documented, deterministic trim). Test rows are padded
    by gradkit itself. Without a distribution the data is returned unchanged."""
    multiple = batch_multiple()
    if multiple == 1:
        return data
    if batch_size % multiple:
        raise ConfigError(
            f"--batch-size must be a multiple of the {multiple} devices. Received: {batch_size}"
        )
    keep = len(data.x_train) - len(data.x_train) % multiple
    return dataclasses.replace(data, x_train=data.x_train[:keep], y_train=data.y_train[:keep])
