"""The model of `gradkit evaluate` loaded from its file (`gradkit.cli._inputs.load_model`): the file's
weights, with no random draw for the initial values the file replaces."""

import keras
import numpy as np
from keras.src.backend import random as backend_random

from gradkit.cli import _inputs

from conftest import set_weights_from

DRAWS = ("uniform", "normal", "truncated_normal")


def _model():
    """Every kind of Keras initial value a classifier has: Glorot (the default), seeded He, Orthogonal,
    a SeedGenerator-seeded normal, BatchNormalization's constants and Dropout's seed state."""
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            layers.Conv2D(3, 3, kernel_initializer=keras.initializers.HeNormal(seed=3)),
            layers.BatchNormalization(),
            layers.Flatten(),
            layers.Dropout(0.1, seed=1),
            layers.Dense(5, kernel_initializer="orthogonal", activation="relu"),
            layers.Dense(
                4, kernel_initializer=keras.initializers.RandomNormal(seed=keras.random.SeedGenerator())
            ),
            layers.Dense(3, activation="softmax"),
        ]
    )


def _saved(tmp_path, model, name="m.keras"):
    path = str(tmp_path / name)
    model.save(path)
    return path


def _counted_draws(monkeypatch):
    calls = []
    for name in DRAWS:
        draw = getattr(backend_random, name)
        monkeypatch.setattr(
            backend_random, name, lambda *a, _draw=draw, _n=name, **k: calls.append(_n) or _draw(*a, **k)
        )
    return calls


def test_the_loaded_weights_are_the_files_with_no_random_draw(tmp_path, monkeypatch):
    model = set_weights_from(_model(), seed=4)
    norm = model.layers[1]
    norm.moving_variance.assign(np.abs(keras.ops.convert_to_numpy(norm.moving_variance)) + 0.5)
    path = _saved(tmp_path, model)
    draws = _counted_draws(monkeypatch)
    loaded = _inputs.load_model(path)
    assert draws == ["normal", "normal"], "only the Orthogonal and the SeedGenerator-seeded kernels are drawn"
    keras.saving.load_model(path)
    assert len(draws) >= 5, "control: a plain load draws every random kernel (4 here)"
    assert len(loaded.weights) == len(model.weights)
    for mine, theirs in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(mine), keras.ops.convert_to_numpy(theirs))
    x = np.random.RandomState(0).rand(5, 6, 6, 1).astype("float32")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
