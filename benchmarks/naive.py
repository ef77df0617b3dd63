"""The obvious way to get an ensemble's input gradient, per backend: eager autodiff, one model at a time.

Benchmark baseline only (the library itself keeps backend code in src/gradkit/backend/).
"""

import keras
import numpy as np


def ensemble_gradient(models, weights, x, y):
    backend = keras.backend.backend()
    total = 0.0
    for model, w in zip(models, weights):
        total = total + w * _one(backend, model, x, y)
    return total


def _loss(model, x, y):
    logits = model(x, training=False)
    return keras.ops.sum(keras.ops.sparse_categorical_crossentropy(y, logits, from_logits=True))


def _one(backend, model, x, y):
    if backend == "tensorflow":
        import tensorflow as tf

        xt = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = _loss(model, xt, y)
        return tape.gradient(loss, xt).numpy()
    if backend == "jax":
        import jax

        def fn(xv):
            values = [v.value for v in model.trainable_variables]
            out, _ = model.stateless_call(values, [v.value for v in model.non_trainable_variables], xv)
            return keras.ops.sum(keras.ops.sparse_categorical_crossentropy(y, out, from_logits=True))

        return np.asarray(jax.grad(fn)(x))
    import torch

    xt = torch.tensor(x, requires_grad=True)
    (grad,) = torch.autograd.grad(_loss(model, xt, torch.tensor(y)), xt)
    return grad.numpy()
