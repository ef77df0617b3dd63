"""Rows in batches: slicing with padding (one compiled shape for every row count) and `predict`."""

import keras
import numpy as np
from keras import tree

from gradkit import backend


def batches(n, batch_size):
    step = batch_size or n
    return [(start, min(start + step, n)) for start in range(0, n, step)]


def padded_size(n_rows, batch_size):
    """The rows a compiled call of `n_rows` rows is padded to, a multiple of the device count.

    With `batch_size`, that size (one traced shape); without it, the next power of two (a bounded
    number of traces for any sequence of row counts). Where a new shape is cheap
    (`backend.ROW_QUANTUM`, PyTorch), only the next multiple of that quantum, capped at `batch_size`.
    """
    quantum = backend.ROW_QUANTUM
    if quantum:
        size = -(-n_rows // quantum) * quantum
        size = min(size, batch_size) if batch_size else size
    else:
        size = batch_size or 1 << max(n_rows - 1, 0).bit_length()
    multiple = backend.batch_multiple()
    return -(-size // multiple) * multiple


def unpadded_size(n_rows):
    """The rows of a compiled call in training mode: `n_rows` itself, never padded (padding rows would
    enter BatchNormalization's batch statistics and change every row's gradient).

    Raises:
        ValueError: under a data-parallel `keras.distribution`, `n_rows` is not a multiple of the device
            count (the batch cannot be sharded evenly without padding).
    """
    multiple = backend.batch_multiple()
    if n_rows % multiple:
        raise ValueError(
            f"training=True never pads a batch (padding rows would enter the batch statistics), so its "
            f"rows must be a multiple of the {multiple} devices of the active keras.distribution. "
            f"Received: a batch of {n_rows} rows (choose batch_size and the number of rows accordingly)"
        )
    return n_rows


def call_size(n_rows, batch_size, training):
    """The rows of a compiled call of `n_rows` rows: `padded_size` (row counts bucketed), or in training
    mode `unpadded_size` (the batch statistics are those of exactly these rows)."""
    return unpadded_size(n_rows) if training else padded_size(n_rows, batch_size)


def take(structure, start, stop, pad_to, zeros=False):
    """Rows start:stop of every leaf, padded up to `pad_to` rows with copies of the first row (or 0)."""

    def take(a):
        rows = a[start:stop]
        if pad_to and rows.shape[0] < pad_to:
            filler = np.repeat(rows[:1] * 0 if zeros else rows[:1], pad_to - rows.shape[0], axis=0)
            rows = np.concatenate([rows, filler])
        if isinstance(rows, np.ndarray):
            return backend.to_tensor(np.ascontiguousarray(rows))
        return keras.ops.convert_to_tensor(rows)

    return take(structure) if isinstance(structure, np.ndarray) else tree.map_structure(take, structure)


def predict_batched(model, x, batch_size=256):
    """`model.predict(x)` that also works data-parallel: under an active `keras.distribution` the rows
    and the batch size are padded to a multiple of the device count (Keras needs even shards), and
    the padding is dropped from the result. Returns numpy output(s) of `n` rows."""
    if backend.mesh_spans_processes():
        return _predict_spanning(model, x, batch_size)
    multiple = backend.batch_multiple()
    if multiple == 1:
        with backend.quiet_retracing(), backend.out_of_memory_hint(batch_size, "a prediction"):
            return model.predict(x, batch_size=batch_size, verbose=0)
    n = len(tree.flatten(x)[0])
    pad = -n % multiple

    def padded(a):
        a = np.asarray(a)
        return np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) if pad else a

    batch = -(-batch_size // multiple) * multiple
    with backend.quiet_retracing(), backend.out_of_memory_hint(batch, "a prediction"):
        out = model.predict(tree.map_structure(padded, x), batch_size=batch, verbose=0)
    return tree.map_structure(lambda o: np.asarray(o)[:n], out)


def _predict_spanning(model, x, batch_size):
    """`model(x)` in padded batches on a mesh over several processes' devices (Keras' `predict` takes
    only a `tf.data.Dataset` there); every process calls it with the same `x` and gets all rows."""
    n = len(tree.flatten(x)[0])
    parts = []
    for start, stop in batches(n, batch_size):
        xb = backend.distribute_batch(take(x, start, stop, padded_size(stop - start, batch_size)))
        out = model(xb, training=False)
        parts.append(tree.map_structure(lambda o, r=stop - start: backend.to_numpy(o)[:r], out))
    return tree.map_structure(lambda *p: np.concatenate(p), *parts)


def rows(g, rows, stacked):
    return g[:, :rows] if stacked else g[:rows]
