"""Gradient-norm diagnostics: the L2 norm of the training-loss gradient w.r.t. the trainable weights.

The same definition serves the one-shot function (`gradient_norm`) and the value logged during `fit`
(`gradkit.GradientNormCallback`):

- global norm: sqrt of the sum of squares of every entry of every trainable weight's gradient;
- per-layer norm `"grad_norm/<layer name>"`: the same over the trainable weights of one top-level layer
  of the model (`model.layers`; a nested model counts as one layer). Layers without trainable weights
  get no entry; trainable weights that belong to no top-level layer count in the global norm only.

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063 (the global gradient norm, and clipping by it).
"""

import keras
import numpy as np

from gradkit import backend, validation
from gradkit.gradients import weight_gradients

PREFIX = "grad_norm"


def norm_layers(model):
    """The top-level layers of `model` that own trainable weights, in `model.layers` order."""
    return [layer for layer in model.layers if layer.trainable_weights]


def layer_groups(model, layers):
    """For each of `layers`, the indices of its weights in `model.trainable_variables`.

    A weight shared by several layers is counted in the first of them only.
    """
    index = {id(v): i for i, v in enumerate(model.trainable_variables)}
    seen, groups = set(), []
    for layer in layers:
        ids = [index[id(v)] for v in layer.trainable_variables if id(v) in index and id(v) not in seen]
        seen.update(id(model.trainable_variables[i]) for i in ids)
        groups.append(ids)
    return groups


def result_names(layers):
    """Log keys: `"grad_norm"` then `"grad_norm/<layer name>"` for each layer."""
    return [PREFIX] + [f"{PREFIX}/{layer.name}" for layer in layers]


class NormValues:
    """Callable `(grads, scale) -> vector [global norm, norm of group 1, ..., 1.0]` (in-step).

    Args:
        groups: index lists from `layer_groups`.

    One backend call, `backend.group_norms`, takes the squared norm of each gradient (one native
    reduction, no copy) and sums them into the global and per-group norms with one product by a
    constant 0/1 matrix, so a step costs a fixed handful of operations whatever the number of layers.
    The last entry, 1.0, is the step's weight in `GradientNormMetric`: the matrix's last row picks the
    extra entry `last` = scale**2 (or 1), whose square root divided by `scale` is 1. The norms are
    divided by `scale` (the loss-scale factor, None for none; a norm is linear in its argument, so
    this equals unscaling the gradients). None gradients count as zero; NaN and inf propagate to every
    norm whose weights hold them.

    No `keras.ops` here: on eager PyTorch a `keras.ops` call costs 15-50 us of dtype handling, more
    than the tensor operation it wraps, and this runs in every training step. The vector is a float32
    tensor, or a list of Python floats where `backend.group_norms` gives one (PyTorch's CPU).
    """

    def __init__(self, groups):
        self.groups = [list(group) for group in groups]
        self._cache = {}

    def _constants(self, present):
        """The 0/1 matrix `(1 + groups + 1, n + 1)` (global row, group rows, weight row) and a 1.0."""
        key = tuple(present)
        if key in self._cache:
            return self._cache[key]
        column = {i: k for k, i in enumerate(present)}
        matrix = np.zeros((2 + len(self.groups), len(present) + 1), np.float32)
        matrix[0, :-1] = 1.0
        for row, group in enumerate(self.groups, start=1):
            matrix[row, [column[i] for i in group if i in column]] = 1.0
        matrix[-1, -1] = 1.0
        constants = keras.ops.convert_to_tensor(matrix), keras.ops.convert_to_tensor(1.0, "float32")
        if backend.EAGER:  # traced backends build them inside each trace (a tensor is tied to its graph)
            self._cache[key] = constants
        return constants

    def __call__(self, grads, scale=None):
        present = [i for i, g in enumerate(grads) if g is not None]
        matrix, one = self._constants(present)
        last = one if scale is None else scale * scale
        values = backend.group_norms([grads[i] for i in present], matrix, last)
        if scale is None:
            return values
        return [value / scale for value in values] if isinstance(values, list) else values / scale


def gradient_norm(
    model,
    x,
    y,
    *,
    sample_weight=None,
    per_layer=False,
    include_regularization=True,
    training=True,
    loss=None,
):
    """The L2 norm of the gradient `fit` would apply on one batch, as a Python float.

    The gradient is `gradkit.weight_gradients` (the compiled loss, reduced the Keras way:
    sum_i w_i * L_i / batch_size, plus `model.losses` when `include_regularization`), taken before any
    clipping (`clipnorm`, `global_clipnorm`) and without loss scaling. Sums of squares are taken in
    float64 from the float32 gradients. This is the value `GradientNormCallback` logs for a step run on
    the same weights and batch (Dropout-free models; with Dropout the masks differ).

    Args:
        model: a built, compiled Keras model (or pass `loss=`).
        x: input batch `(n, ...)`, or a list/dict of arrays for several inputs. One batch: split data
            into batches yourself to get per-batch norms.
        y: targets as for `fit`: class ids `(n,)` or one-hot for cross-entropy losses, else arrays of
            the output's shape; a list/dict for several outputs.
        sample_weight: optional non-negative float `(n,)`. Defaults to ones.
        per_layer: also return each top-level layer's norm. Defaults to False.
        include_regularization: add the regularization losses (weight and activity regularizers), as
            `fit` does. Defaults to True.
        training: run the forward pass in training mode, as `fit` does (Dropout active, BatchNorm on
            batch statistics; no variable is changed). Defaults to True.
        loss: None (the compiled loss) or a loss name, `keras.losses.Loss` or callable.

    Returns:
        float (the global norm, >= 0, NaN/inf if the gradient has them) or, with `per_layer=True`, a dict
        `{"grad_norm": g, "grad_norm/<layer name>": g_layer, ...}` of floats, layers in `model.layers`
        order, layers without trainable weights omitted.

    Raises:
        TypeError: `model` is not a `keras.Model`; `per_layer`, `include_regularization` or `training`
            is not a bool.
        ValueError: bad data, labels or sample weights; no loss; no trainable weights.
        gradkit.errors.DisconnectedGradientError: the loss does not depend on the weights (argmax).
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    Example:
        >>> gradkit.gradient_norm(model, x[:32], y[:32])                # doctest: +SKIP
        0.8314
        >>> gradkit.gradient_norm(model, x[:32], y[:32], per_layer=True)  # doctest: +SKIP
        {'grad_norm': 0.8314, 'grad_norm/dense': 0.61, 'grad_norm/dense_1': 0.56}
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"`model` must be a keras.Model. Received: {type(model).__name__}")
    per_layer = validation.check_flag(per_layer, "per_layer")
    include_regularization = validation.check_flag(include_regularization, "include_regularization")
    training = validation.check_flag(training, "training")
    grads = weight_gradients(
        model,
        x,
        y,
        sample_weight=sample_weight,
        loss=loss,
        training=training,
        include_regularization=include_regularization,
    )
    squares = [float(np.square(g, dtype=np.float64).sum()) for g in grads]
    norm = float(np.sqrt(sum(squares)))
    if not per_layer:
        return norm
    layers = norm_layers(model)
    result = {PREFIX: norm}
    for name, group in zip(result_names(layers)[1:], layer_groups(model, layers)):
        result[name] = float(np.sqrt(sum(squares[i] for i in group)))
    return result
