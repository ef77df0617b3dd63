"""The first half of a training step's batch and Keras' training loss on it (the noise scale of
`gradkit.monitor`): what the three backends share; each differentiates `half_loss` its own way, in its
`noise_scale.py`.

`first_half(data)` gives `(half, b1, b)`: the step's data cut to its first `b1 = b // 2` rows (x, y and
sample weights alike) and the batch size `b` (ints, or scalar int32 tensors where TensorFlow traces an
unknown batch size). `half_loss(model, trainable, non_trainable, metrics, half, scale)` is the loss `fit`
minimizes (Keras' `compute_loss`: the compiled loss with its sample-weight convention, plus the model's
regularization losses) on those rows, stateless: no variable changes (BatchNorm's moving statistics,
the metrics, the seed generators' states are read, their updates dropped), times the loss-scale factor
`scale` (None: 1) so that its gradient is scaled as the step's own. `mean_reduced(loss)` tells whether a
compiled loss averages over the rows, which the half-batch split of JAX and PyTorch needs.
"""

import keras

from gradkit import _keras_internals


def _unpack(data):
    return keras.utils.unpack_x_y_sample_weight(data)


def first_half(data):
    """`(half, b1, b)` (see the module docstring)."""
    x, y, sample_weight = _unpack(data)
    b = keras.ops.shape(keras.tree.flatten(x)[0])[0]
    b1 = b // 2

    def cut(t):
        return None if t is None else t[:b1]

    half = tuple(
        None if part is None else keras.tree.map_structure(cut, part) for part in (x, y, sample_weight)
    )
    return half, b1, b


def half_loss(model, trainable, non_trainable, metrics, half, scale=None):
    """Keras' training loss on `half = (x, y, sample_weight)`, stateless, times `scale` (a float32 scalar)."""
    x, y, sample_weight = half
    kwargs = {"training": True} if _keras_internals.call_has_training_arg(model) else {}
    y_pred, _, losses = model.stateless_call(trainable, non_trainable, x, return_losses=True, **kwargs)
    with _keras_internals.forward_losses(model, losses):
        loss, _ = model.stateless_compute_loss(
            trainable,
            non_trainable,
            metrics,
            x=x,
            y=y,
            y_pred=y_pred,
            sample_weight=sample_weight,
            training=True,
        )
    loss = keras.ops.cast(loss, "float32")
    return loss if scale is None else loss * keras.ops.cast(scale, "float32")


def mean_reduced(loss):
    """Whether a compiled loss (a name, a function, a `keras.losses.Loss`) averages over the batch rows
    (the half-batch gradient split of JAX's and PyTorch's `noise_scale.py` is exact only then)."""
    if isinstance(loss, str) or (callable(loss) and not isinstance(loss, keras.losses.Loss)):
        return True  # wrapped by Keras with its default reduction
    return getattr(loss, "reduction", None) == "sum_over_batch_size"
