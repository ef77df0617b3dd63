"""Two-class linear models whose smallest adversarial perturbation has a closed form: the oracle of the
minimum-norm attacks (FMN, DDN, FAB) and of `min_norm`."""

import keras
import numpy as np

D = 10


RNG = np.random.default_rng(0)


W = RNG.standard_normal((D, 2)).astype("float32")  # two classes: the closed forms below are exact


X = RNG.uniform(0.35, 0.65, (12, D)).astype("float32")


C = float(-np.median(X @ (W[:, 1] - W[:, 0])))  # the bias that puts the boundary among the points


DUAL = {2: 2, np.inf: 1, 1: np.inf}


def linear(weights=W):
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(weights.shape[1])])
    model.set_weights([weights, np.array([0.0, C], "float32")])
    return model


def labels_of(model, x):
    return keras.ops.convert_to_numpy(model(x)).argmax(1)


def labels(model):
    return labels_of(model, X)


class OddMargin(keras.layers.Layer):
    """Two-class logits [0, f(a)] with f(a) = a - 0.05 a|a|: the sign of a, curved so that the linear
    estimate of the distance to the boundary overshoots it (on an exactly linear model FMN lands ON
    the boundary, where float rounding decides; adv-lib and foolbox do the same)."""

    def call(self, a):
        return keras.ops.concatenate([keras.ops.zeros_like(a), a - 0.05 * a * keras.ops.abs(a)], axis=-1)


def curved(weights=W, sign=1.0):
    """A classifier deciding as `linear(weights)` (two classes: class 1 iff a = x @ (w_1 - w_0) + C > 0),
    so its minimal perturbations have the closed form of `exact`."""
    w = (weights[:, 1] - weights[:, 0])[:, None]
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(1), OddMargin()])
    model.set_weights([sign * w, np.array([sign * C], "float32")])
    return model


def exact(x, y, norm, weights=W):
    """Closed form for two classes: the smallest Lp perturbation that flips the decision is
    |z_1 - z_0| / ||w_1 - w_0||_dual (Hoelder; no box active: the points sit in the middle of [0, 1])."""
    w = weights[:, 1] - weights[:, 0]
    return np.abs(x @ w + C) / np.linalg.norm(w, ord=DUAL[norm])


def lp(a, norm):
    return np.linalg.norm(np.asarray(a, np.float64).reshape(len(a), -1), ord=norm, axis=1)
