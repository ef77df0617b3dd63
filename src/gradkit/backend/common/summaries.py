"""TensorBoard summaries through TensorFlow's summary writer, as `keras.callbacks.TensorBoard` writes them
on every backend (it imports `tensorflow.summary`): gradkit's gradient histograms (`gradkit.monitor`).

TensorFlow and TensorBoard are imported only when a summary is written (the JAX and PyTorch backends
run without them otherwise).
"""

import importlib.util
import os

import numpy as np

_WRITERS = {}  # one writer per directory, kept for the process (as Keras keeps its own per callback)


def summaries_available():
    """Whether TensorFlow's summary writer and TensorBoard's histogram plugin can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("tensorflow", "tensorboard"))


def write_histograms(log_dir, items, step):
    """Writes one histogram per item into `<log_dir>/train` at `step` (int), then flushes.

    Args:
        log_dir: the TensorBoard log directory (str or os.PathLike), as given to
            `keras.callbacks.TensorBoard(log_dir)`.
        items: list of `(tag, low, high, counts)`: counts (k,) of k equal-width bins from low to high,
            written in TensorBoard's histogram format (a `(k, 3)` tensor of left edge, right edge,
            count; the histogram plugin's metadata), as `tf.summary.histogram` writes.
        step: the summary step (the epoch).
    """
    import tensorflow as tf
    from tensorboard.plugins.histogram import metadata

    path = os.path.join(os.fspath(log_dir), "train")
    if path not in _WRITERS:
        _WRITERS[path] = tf.summary.create_file_writer(path)
    writer = _WRITERS[path]
    with writer.as_default():
        for tag, low, high, counts in items:
            counts = np.asarray(counts, np.float64)
            edges = np.linspace(low, high, len(counts) + 1)
            tensor = np.stack([edges[:-1], edges[1:], counts], axis=1)
            info = metadata.create_summary_metadata(tag, "gradient entries of one training step (gradkit)")
            tf.summary.write(tag, tf.constant(tensor, tf.float64), step=int(step), metadata=info)
    writer.flush()
