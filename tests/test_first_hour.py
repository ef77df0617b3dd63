"""Errors that point the way for a newcomer's first hour (issue 20), on every backend."""

import keras
import numpy as np
import pytest

import gradkit


def mlp():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(loss="sparse_categorical_crossentropy")
    return model


def test_integer_images_get_the_conversion_with_the_users_name():
    x = np.random.RandomState(0).randint(0, 256, size=(5, 4)).astype("uint8")
    with pytest.raises(
        TypeError, match=r"`x` holds integers \(dtype uint8\).*x.astype\('float32'\) / 255"
    ) as err:
        gradkit.fgsm(mlp(), x, np.zeros(5, int), eps=0.1)
    assert "keras_tensor" not in str(err.value) and "Embedding" not in str(err.value)


def test_a_file_path_as_x_is_named_as_such():
    with pytest.raises(TypeError, match="not a string or file path"):
        gradkit.fgsm(mlp(), "data/x_test.npy", [0], eps=0.1)


def test_load_of_a_keras_file_points_to_keras():
    with pytest.raises(ValueError, match="keras.saving.load_model"):
        gradkit.load("run/single.keras")
