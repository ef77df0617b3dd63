"""TensorFlow's noise scale: the gradient of the loss on the first half of a step's batch, one more
backward pass over those rows inside the step (`common/halves.py`)."""

import tensorflow as tf

from gradkit.backend.common.halves import first_half, half_loss


def half_gradients(model, data, trainable, scale):
    """`(g1, b1, b)`: the gradient of the loss on the first half of `data` at the weights `trainable`
    (tensors), scaled by `scale` as the step's own (`common/halves.py`)."""
    half, b1, b = first_half(data)
    if isinstance(b1, int) and b1 == 0:  # a batch of one row: no half (refused, or the step left out)
        return [tf.zeros_like(t) for t in trainable], b1, b
    non_trainable = [tf.convert_to_tensor(v.value) for v in model.non_trainable_variables]
    metrics = [tf.convert_to_tensor(v.value) for v in model.metrics_variables]
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(trainable)
        loss = half_loss(model, trainable, non_trainable, metrics, half, scale)
    grads = tape.gradient(loss, trainable)
    return (
        [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g) for t, g in zip(trainable, grads)],
        b1,
        b,
    )
