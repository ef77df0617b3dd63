"""The core functions that several backends share as they are: Keras' own `stateless_call`, a compiled
forward's `bind`, no retracing warnings to silence, and Keras' seeding without TensorFlow."""

import contextlib

from gradkit import _keras_internals


def bind_all_but_x(call):
    """`call.bind` of a compiled forward where a call costs no Python to speak of (TensorFlow, JAX).

    Args:
        call: the compiled `call(trainable, non_trainable, x, y, weights)`.

    Returns:
        `bind(trainable, non_trainable, y, weights)`, which returns `lambda x: call(trainable,
        non_trainable, x, y, weights)`.
    """

    def bind(trainable, non_trainable, y, weights):
        return lambda x: call(trainable, non_trainable, x, y, weights)

    return bind


def stateless_call(model, trainable, non_trainable, *args, **kwargs):
    """`model.stateless_call(trainable, non_trainable, *args, **kwargs)`: every layer reads the values
    given."""
    return model.stateless_call(trainable, non_trainable, *args, **kwargs)


def quiet_retracing():
    """No retracing warnings to silence on this backend: a do-nothing context manager."""
    return contextlib.nullcontext()


def set_random_seed(seed):
    """Seeds Keras, Python and numpy (JAX: its keys come from Keras' seed) without importing TensorFlow."""
    _keras_internals.set_keras_seed(int(seed))
