"""Data that does not fit in memory, for `evaluate`: recognised once and read as numpy `(x, y)` blocks of
the evaluation's block size, one block at a time.

Sources (`is_stream`), recognised without importing a framework (duck typing):
- a memory-mapped array (`np.load(path, mmap_mode="r")`, a `np.memmap`), its labels `y` in memory;
- a `keras.utils.PyDataset` (`ds[i]` is batch i: `(x, y)` or `(x, y, sample_weight)`);
- a `tf.data.Dataset` (`as_numpy_iterator()`), a torch `DataLoader`, or any other iterable or generator
  of `(x, y)` batches (framework tensors read with `.numpy()`, torch's from the host).

`blocks(source, y, rows)` re-blocks the batches to `rows` consecutive points (the last block shorter),
whatever the source's own batch size, so block j holds the points `[j * rows, (j + 1) * rows)` of the
concatenated data: the blocks an in-memory evaluation seeds with `seed + j`.
"""

import inspect

import keras
import numpy as np

from gradkit import _checks


def is_stream(x):
    """Whether `x` is a source of batches (or a memory-mapped array) rather than arrays in memory."""
    if isinstance(x, np.memmap) or isinstance(x, keras.utils.PyDataset):
        return True
    if isinstance(x, (np.ndarray, list, tuple, dict, str, bytes)) or hasattr(x, "__array__"):
        return False
    return inspect.isgenerator(x) or hasattr(x, "as_numpy_iterator") or hasattr(x, "__iter__")


def can_reread(x):
    """Whether iterating `x` again starts from its first batch (False for a generator or an iterator)."""
    return not (inspect.isgenerator(x) or iter_is_self(x))


def iter_is_self(x):
    try:
        return hasattr(x, "__next__") and iter(x) is x
    except TypeError:
        return False


def describe(x):
    """The source's kind in words, for messages and the state's fingerprint."""
    if isinstance(x, np.memmap):
        return f"a memory-mapped array of shape {x.shape}"
    return f"a stream of batches ({type(x).__module__}.{type(x).__qualname__})"


def _numpy(a):
    """A batch's array as numpy: torch tensors detached and moved to the host, others by `.numpy()` or
    `np.asarray`."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach"):  # torch
        return a.detach().cpu().numpy()
    if hasattr(a, "numpy"):  # TensorFlow eager tensors
        return np.asarray(a.numpy())
    return np.asarray(a)


def _pair(batch, i):
    """`(x, y)` numpy of one batch; ValueError naming the batch otherwise."""
    if isinstance(batch, dict) or not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        _checks.fail(
            "x",
            "a source whose batches are (x, y) or (x, y, sample_weight) pairs of arrays",
            f"batch {i} of type {type(batch).__name__}",
        )
    x, y = _numpy(batch[0]), _numpy(batch[1])
    if len(x) != len(y):
        _checks.fail("x", "batches whose x and y have one length", f"batch {i}: x {x.shape}, y {y.shape}")
    return x, y


def _batches(source):
    """The source's `(x, y)` numpy batches, in order."""
    if isinstance(source, keras.utils.PyDataset):
        for i in range(len(source)):  # PyDataset's num_batches; an infinite one has no len
            yield _pair(source[i], i)
        source.on_epoch_end()
        return
    iterator = source.as_numpy_iterator() if hasattr(source, "as_numpy_iterator") else iter(source)
    for i, batch in enumerate(iterator):
        yield _pair(batch, i)


def check(source, y):
    """TypeError/ValueError before any work: labels with a memory-mapped array, none with batches."""
    if isinstance(source, np.memmap):
        if y is None:
            _checks.fail("y", "the labels (an array) of the memory-mapped x", y)
        if len(np.asarray(y)) != len(source):
            _checks.fail("y", f"{len(source)} labels, one per row of x", f"{len(np.asarray(y))} labels")
    elif y is not None:
        _checks.fail("y", "None when x is a source of (x, y) batches (the labels come with them)", "an array")


def blocks(source, y, rows):
    """`(x, y)` numpy blocks of `rows` consecutive points (the last may be shorter) of a checked source.

    Args:
        source: what `is_stream` accepts; y: its labels for a memory-mapped array, else None.
        rows: int >= 1, the points per block.

    Yields:
        `(x_block, y_block)` numpy arrays; a memory-mapped array reads only the block's rows.
    """
    if isinstance(source, np.memmap):
        y = np.asarray(y)
        for start in range(0, len(source), rows):
            yield np.array(source[start : start + rows]), y[start : start + rows]
        return
    xs, ys, held = [], [], 0
    for x, labels in _batches(source):
        xs.append(x)
        ys.append(labels)
        held += len(x)
        while held >= rows:
            x_all, y_all = (xs[0], ys[0]) if len(xs) == 1 else (np.concatenate(xs), np.concatenate(ys))
            xs, ys, held = [x_all[rows:].copy()], [y_all[rows:].copy()], held - rows  # no view keeps x_all
            yield x_all[:rows], y_all[:rows]
            del x_all, y_all
    if held:
        yield np.concatenate(xs), np.concatenate(ys)
