"""Out-of-memory errors of the three frameworks, told apart from other failures and re-raised as one
gradkit error that names `batch_size` (the argument that bounds the rows of a compiled call)."""

import contextlib

import keras

from gradkit.errors import OutOfMemoryError


def is_out_of_memory(exc):
    """Whether `exc` is the current backend's out-of-memory error: TensorFlow's
    `tf.errors.ResourceExhaustedError`; PyTorch's `torch.OutOfMemoryError` or a `RuntimeError` whose
    message says "out of memory" (older releases, other devices); JAX's `JaxRuntimeError`
    (`XlaRuntimeError`) with status `RESOURCE_EXHAUSTED`."""
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return isinstance(exc, tf.errors.ResourceExhaustedError)
    if name == "torch":
        import torch

        return isinstance(exc, torch.OutOfMemoryError) or (
            isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
        )
    if name == "jax":
        import jax

        return isinstance(exc, jax.errors.JaxRuntimeError) and "RESOURCE_EXHAUSTED" in str(exc)
    return False


@contextlib.contextmanager
def out_of_memory_hint(rows, what="an attack step"):
    """Re-raises the backend's out-of-memory error inside the block as `gradkit.OutOfMemoryError`,
    naming the `rows` of the failing call and `batch_size`; any other exception passes unchanged."""
    try:
        yield
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise OutOfMemoryError(
            f"The device ran out of memory in {what} on a batch of {rows} rows ({type(exc).__name__}: "
            f"{first}). Pass a smaller `batch_size` (rows per compiled call), e.g. "
            f"batch_size={max(rows // 2, 1)}, or free the device's memory."
        ) from exc
