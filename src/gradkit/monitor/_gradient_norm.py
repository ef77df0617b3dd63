"""The L2 norm of the training-loss gradient w.r.t. the trainable weights, global and per top-level layer.

One definition serves `gradient_norm` (one batch) and the values logged during `fit`: the global norm
is the square root of the sum of squares of every entry of every trainable weight's gradient; the
per-layer norm `"grad_norm/<layer name>"` is the same over the trainable weights of one top-level layer
(`model.layers`; a nested model counts as one layer). Layers without trainable weights get no entry;
trainable weights that belong to no top-level layer count in the global norm only.

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063 (the global gradient norm, and clipping by it).
"""

import numpy as np

from gradkit import _checks
from gradkit.gradients import check_model, weight_gradients

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
    clipping (`clipnorm`, `global_clipnorm`); under a float16 policy the loss is scaled as `fit`'s
    `LossScaleOptimizer` scales it and the gradient unscaled, so this is the norm of the unscaled
    gradient the optimizer applies. Sums of squares are taken in
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

    References:
        Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks",
        ICML, https://arxiv.org/abs/1211.5063.

    Example:
        >>> gradkit.gradient_norm(model, x[:32], y[:32])                # doctest: +SKIP
        0.8314
        >>> gradkit.gradient_norm(model, x[:32], y[:32], per_layer=True)  # doctest: +SKIP
        {'grad_norm': 0.8314, 'grad_norm/dense': 0.61, 'grad_norm/dense_1': 0.56}
    """
    check_model(model)
    per_layer = _checks.check_flag(per_layer, "per_layer")
    include_regularization = _checks.check_flag(include_regularization, "include_regularization")
    training = _checks.check_flag(training, "training")
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
