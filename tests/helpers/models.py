"""The small models and data that the attack, evaluation and peer tests share: networks trained on
scikit-learn's digits (nothing is downloaded), a least-squares linear digits classifier and its copy
behind an input-rounding layer, a random CNN on 6x6x2 images, two-feature linear models and the
ensemble whose loud member outweighs the deciding one in the loss but not in the vote."""

import keras
import numpy as np
from sklearn.datasets import load_digits

import gradkit

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def digits_mlp():
    """64 -> Dense(32, relu) -> Dense(10, softmax), 15 epochs on digits 0-1199; rows 1200-1399 returned."""
    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.data / 16.0).astype("float32"), d.target
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.fit(x[:1200], y[:1200], epochs=15, batch_size=64, verbose=0)
    return model, x[1200:1400], y[1200:1400]


def digits_cnn(filters=16, n_train=1400, epochs=6, n_test=300):
    """8x8x1 -> Conv2D(filters, 3, relu) -> Flatten -> Dense(10) logits, trained on the first `n_train`
    digits; the next `n_test` are returned with the model."""
    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.images / 16.0).astype("float32")[..., None], d.target
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(filters, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(keras.optimizers.Adam(0.01), LOGITS_CE)
    model.fit(x[:n_train], y[:n_train], epochs=epochs, batch_size=64, verbose=0)
    return model, x[n_train : n_train + n_test], y[n_train : n_train + n_test]


@keras.saving.register_keras_serializable(package="gradkit_tests")
class Round255(keras.layers.Layer):
    """x rounded to 8-bit levels (multiples of 1/255): an input defence whose gradient is zero."""

    def call(self, x):
        return keras.ops.round(x * 255.0) / 255.0


def digits_linear():
    """`(linear, rounded, x, y)`: 64 digit pixels in [0, 1] -> Dense(10) logits fitted by least squares
    to the one-hot labels of the first 1200 digits (the same weights on every backend, no training),
    the same Dense layer behind `Round255`, and the next 100 digits."""
    d = load_digits()
    x, y = (d.data / 16.0).astype("float32"), d.target
    design = np.hstack([x[:1200], np.ones((1200, 1))])
    w = np.linalg.lstsq(design, np.eye(10)[y[:1200]], rcond=None)[0]
    inputs, dense = keras.Input((64,)), keras.layers.Dense(10)
    linear = keras.Model(inputs, dense(inputs))
    dense.set_weights([w[:-1].astype("float32"), w[-1].astype("float32")])
    return linear, keras.Model(inputs, dense(Round255()(inputs))), x[1200:1300], y[1200:1300]


def small_cnn(seed=0):
    """6x6x2 -> Conv2D(4, 3, relu) -> Flatten -> Dense(3) logits, randomly initialised with `seed`."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3),
        ]
    )
    model.compile(loss=LOGITS_CE)
    return model


def random_images(n=20):
    """`n` uniform 6x6x2 images in [0, 1) and labels in {0, 1, 2} (numpy seed 0)."""
    rng = np.random.RandomState(0)
    return rng.uniform(size=(n, 6, 6, 2)).astype("float32"), rng.randint(0, 3, n)


def linear(kernel, bias):
    """Two features -> Dense(2) logits with the given (2, 2) kernel and (2,) bias."""
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.asarray(kernel, "float32"), np.asarray(bias, "float32")])
    model.compile(loss=LOGITS_CE)
    return model


def loud_ensemble():
    """Member 0 (weight 0.6) decides the vote: class 1 iff x0 > 0.5. Member 1 (z1 = 30 - 50 x0) is
    saturated on class 1, and its cross-entropy gradient is 50x larger and points the other way."""
    deciding = linear([[0.0, 1.0], [0.0, 0.0]], [0.0, -0.5])
    loud = linear([[0.0, -50.0], [0.0, 0.0]], [0.0, 30.0])
    return gradkit.WeightedEnsemble([deciding, loud], [0.6, 0.4])


def accuracy(model, x, y):
    """The fraction of rows whose argmax of `model.predict` is the label."""
    return float(np.mean(model.predict(x, verbose=0).argmax(axis=1) == y))


def l1_sizes(adv, x):
    """The per-row L1 distance of `adv` from `x`, in float64."""
    return np.abs(adv.astype(np.float64) - x).reshape(len(x), -1).sum(axis=1)
