"""TensorFlow's retracing warnings about gradkit's own compiled functions, filtered."""

import contextlib
import logging

import tensorflow as tf


class _OwnTracesFilter(logging.Filter):
    """Drops TensorFlow's "N out of the last N calls to ... triggered tf.function retracing" about
    gradkit's own functions: TensorFlow counts traces per code object, so one `compile_grad` (or
    `compile_forward`) per model (each traced once per input signature, see `trace_count`) reads to it
    as one function retracing.
    """

    def filter(self, record):
        message = record.getMessage()
        own = any(
            f"{name}.<locals>" in message
            for name in ("compile_grad", "compile_forward", "compile_step", "compile_search")
        )
        return "tf.function retracing" not in message or not own


tf.get_logger().addFilter(_OwnTracesFilter())


class _RetracingFilter(logging.Filter):
    def filter(self, record):
        return "tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def quiet_retracing():
    """Drops TensorFlow's retracing warnings inside the block: gradkit's own `predict` on each new model
    (boosting members) traces Keras' predict function once per model, which is not a retrace."""
    quiet = _RetracingFilter()
    tf.get_logger().addFilter(quiet)
    try:
        yield
    finally:
        tf.get_logger().removeFilter(quiet)
