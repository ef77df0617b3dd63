"""The data-parallel hooks of the backends without `keras.distribution` support (TensorFlow, PyTorch):
one device, and a clear error where a distribution is set."""

import keras


def batch_multiple():
    """Rows per batch must be a multiple of this (1: no data parallelism on this backend)."""
    _refuse_distribution()
    return 1


def distribute_batch(structure):
    """No-op; raises NotImplementedError when a `keras.distribution` is active."""
    _refuse_distribution()
    return structure


def _refuse_distribution():
    if keras.distribution.distribution() is not None:
        raise NotImplementedError(
            "gradkit runs data-parallel only on the JAX backend: Keras' distribution API "
            f"(keras.distribution) is not supported on {keras.backend.backend()} (TensorFlow's is a "
            "prototype, PyTorch has none), and gradkit will not silently run on one device. Use "
            "KERAS_BACKEND=jax, or call keras.distribution.set_distribution(None)."
        )
