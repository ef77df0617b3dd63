"""Per-weight statistics of a training step, for the diagnostics of `gradkit.monitor` (TF and JAX).

`weight_stats(grads, before, after, columns, shapes, clip)` gives a float32 tensor `(n, len(columns))`:
for each of the n trainable weights, the statistics named in `columns` (`gradkit.monitor._groups.COLUMNS`):

- "sq": |g|^2, "clip_sq": |clip(g, -clip, clip)|^2, "max": max |g|, "nonfinite": the count of NaN and
  inf entries of g, "zeros": the count of exact zeros of g (gradients as given: loss scale not removed);
- "param_sq": |w|^2 of the weight before the step, "update_sq": |w_after - w_before|^2;
- "full_sq", "half_sq", "other_sq" (the noise scale; `half = (full, g1, b1, b[, g2])`: the step's own
  gradient of its b rows, the gradient of its first b1 rows): |full|^2, |g1|^2 and |g2|^2, where
  g2, unless given, is (b full - b1 g1) / (b - b1), the gradient of the other b - b1 rows (exact for a
  loss that is a sum over rows divided by b, as Keras' is, plus terms that do not depend on the rows).
  |full|^2 is the "sq" column's value where `full` holds the step's gradients `grads` themselves.

A None gradient counts as a zero tensor of its weight's shape (`shapes`). TensorFlow and JAX trace this
into the step (`keras.ops` costs nothing per step there); PyTorch has its own (`torch/weight_stats.py`).
"""

import keras
from keras import ops


def _count_zeros(total):
    return lambda g: total(ops.cast(ops.equal(g, 0.0), "float32"))


def _nonfinite(total, g, sq):
    """The count of non-finite entries of `g`, taken only where its squared norm `sq` is not finite."""
    count = lambda: total(ops.cast(ops.logical_not(ops.isfinite(g)), "float32"))  # noqa: E731
    return ops.cond(ops.isfinite(sq), lambda: ops.zeros((), "float32"), count)


def _halves(squared_norm, g, full, g1, b1, b, shape, g2=None, sq=None):
    """The noise-scale columns; |full|^2 is the "sq" column's where `full` is the step's gradient `g`
    (one pass fewer), and g2 is computed only where the backend did not give it."""
    f32 = lambda t: ops.zeros(shape, "float32") if t is None else ops.cast(t, "float32")  # noqa: E731
    same = full is g and full is not None
    full, g1 = f32(full), f32(g1)
    if g2 is None:
        b1, b = ops.cast(b1, "float32"), ops.cast(b, "float32")
        g2 = (b * full - b1 * g1) / (b - b1)
    full_sq = sq if sq is not None and same else squared_norm(full)
    return {"full_sq": full_sq, "half_sq": squared_norm(g1), "other_sq": squared_norm(f32(g2))}


def _row(reductions, g, w0, w1, columns, clip, shape, half):
    """One weight's statistics, in the order of `columns` (a float32 vector)."""
    squared_norm, total, count_zeros = reductions
    raw = g
    g = ops.zeros(shape, "float32") if g is None else ops.cast(g, "float32")
    row, done = [], {}
    for column in columns:
        if column in ("full_sq", "half_sq", "other_sq"):
            if not done.get("noise"):
                done["noise"] = _halves(squared_norm, raw, *half[:4], shape, *half[4:], sq=done.get("sq"))
            row.append(done["noise"][column])
        elif column == "param_sq":
            row.append(squared_norm(ops.cast(w0, "float32")))
        elif column == "update_sq":
            row.append(squared_norm(ops.cast(w1, "float32") - ops.cast(w0, "float32")))
        elif column == "sq":
            done["sq"] = squared_norm(g)
            row.append(done["sq"])
        elif column == "clip_sq":
            row.append(squared_norm(ops.clip(g, -clip, clip)))
        elif column == "max":
            row.append(ops.max(ops.abs(g)))
        elif column == "nonfinite":
            row.append(_nonfinite(total, g, done["sq"]))
        else:  # "zeros"
            row.append(count_zeros(g))
    return ops.stack(row)


def stats_builder(squared_norm, total=ops.sum, count_zeros=None):
    """`weight_stats` built on the backend's fastest reductions.

    Args:
        squared_norm: `squared_norm(t)`, the squared L2 norm of a tensor, a float32 scalar.
        total: `total(t)`, the sum of a float32 tensor. Defaults to `ops.sum`.
        count_zeros: `count_zeros(g)`, the count of exact zeros. Defaults to `total` of `g == 0`.

    Returns:
        `weight_stats(grads, before, after, columns, shapes, clip=None, half=None)` (see the module
        docstring). The count of non-finite entries is taken only where the squared norm is not finite
        (a conditional: no pass over a finite gradient).
    """
    reductions = (squared_norm, total, count_zeros or _count_zeros(total))

    def weight_stats(grads, before, after, columns, shapes, clip=None, half=None):
        before = before or [None] * len(grads)
        after = after or [None] * len(grads)
        pairs = [None] * len(grads)
        if half is not None:
            full, g1, b1, b, *other = half
            others = other[0] if other else [None] * len(grads)
            pairs = [(f, h, b1, b, o) for f, h, o in zip(full, g1, others)]
        rows = zip(grads, before, after, shapes, pairs)
        return ops.stack([_row(reductions, g, w0, w1, columns, clip, s, p) for g, w0, w1, s, p in rows])

    return weight_stats


def cond(predicate, true_fn, size):
    """`true_fn()` (a float32 vector of `size`) where `predicate` holds, else zeros; only one branch runs."""
    return keras.ops.cond(predicate, true_fn, lambda: keras.ops.zeros((size,), "float32"))
