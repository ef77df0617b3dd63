"""Per-layer histograms of one training step's own gradients, for TensorBoard (`histogram_freq=`).

Inside the step, on the first recorded step at or after the optimizer iteration held in the metric's
`hist_from` (the callback sets it to the first step of each `histogram_freq`-th epoch; +inf: none), each
top-level trainable layer's gradient entries are reduced to a small table (`table`), which the metric
keeps; `GradientNormCallback` writes it at the epoch's end (`write`).
"""

import keras
import numpy as np

from gradkit import _checks, backend
from gradkit.monitor._gradient_norm import layer_groups, norm_layers

BINS = 30  # tf.summary.histogram's default
TAG = "{layer}/gradient_histogram"


def layers_of(model):
    """`(names, rows)`: the top-level trainable layers' names and their weight indices."""
    layers = norm_layers(model)
    return [layer.name for layer in layers], layer_groups(model, layers)


def size(n_layers):
    """Entries of the step's histogram table (and of its `due` flag)."""
    return n_layers * (BINS + 2) + 1


def table(grads, rows, shapes):
    """The float32 vector `[min, max, counts...]` per layer, then 1.0 (the `due` flag).

    A layer's entries are those of all its weights' gradients together (loss scale divided out; under
    gradient accumulation those of the applied update), in `BINS` equal-width bins from min to max
    (`keras.ops.histogram`, as `tf.summary.histogram` makes them). Nothing else leaves the step, and
    other steps compute nothing (a traced conditional).
    """
    ops = keras.ops
    out = []
    for row in rows:
        flat = [ops.reshape(_dense(grads[i], shapes[i]), (-1,)) for i in row]
        flat = flat[0] if len(flat) == 1 else ops.concatenate(flat)
        counts, _ = ops.histogram(flat, bins=BINS)
        out.extend([ops.stack([ops.min(flat), ops.max(flat)]), ops.cast(counts, "float32")])
    out.append(ops.ones((1,), "float32"))
    return ops.concatenate(out)


def _dense(g, shape):
    return keras.ops.zeros(shape, "float32") if g is None else keras.ops.cast(g, "float32")


def check_histogram_freq(histogram_freq):
    """`histogram_freq` as an int >= 0; > 0 needs TensorFlow's summary writer (TensorBoard)."""
    histogram_freq = _checks.check_int(histogram_freq, "histogram_freq", minimum=0)
    if histogram_freq and not backend.summaries_available():
        _checks.fail(
            "histogram_freq",
            "0 without TensorBoard: gradient histograms are written by TensorFlow's summary writer, as "
            "keras.callbacks.TensorBoard writes its own (pip install tensorflow-cpu tensorboard)",
            histogram_freq,
        )
    return histogram_freq


def write(log_dir, names, values, step):
    """Writes the table `values` (numpy, from the metric) as one histogram per layer at `step`.

    Through `backend.write_histograms` (TensorFlow's summary writer) in `<log_dir>/train`, where
    `keras.callbacks.TensorBoard(log_dir)` writes its scalars and weight histograms (one more event file
    there; TensorBoard reads them all).
    """
    values = np.asarray(values, np.float64)
    items = []
    for i, name in enumerate(names):
        part = values[i * (BINS + 2) : (i + 1) * (BINS + 2)]
        items.append((TAG.format(layer=name), part[0], part[1], part[2:]))
    backend.write_histograms(log_dir, items, step)


def appended(values, context, grads, rows, shapes):
    """The step's values (`StepStatistics`, ending with the weight) with the histogram table and its
    `due` flag inserted before the weight: the table on the first recorded step at or after
    `context["hist_from"]`, zeros (and `due` 0) on the others (a traced conditional)."""
    host = isinstance(values, list)
    if backend.STEPS_RUN_EAGERLY:
        due = context["iteration"] >= context["hist_from"]
    else:
        due = keras.ops.cast(context["iteration"], "float32") >= context["hist_from"]

    def part():
        t = table(grads, rows, shapes)
        return [float(v) for v in backend.to_numpy(t)] if host else t

    piece = backend.cond(due, part, size(len(rows)))
    if host:
        return values[:-1] + list(piece) + values[-1:]
    return keras.ops.concatenate([values[:-1], piece, values[-1:]])
