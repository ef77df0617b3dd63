"""`StepStatistics`: every diagnostic key of one training step, from the tensors the step already has.

`gradkit.backend.weight_stats` reduces each trainable weight's gradient (and, for "params" and
"updates", its values before and after the step) to a few numbers (`_groups.COLUMNS`); this module
turns that `(n, m)` table into the log values.
"""

import keras
import numpy as np

from gradkit import backend
from gradkit.monitor import _groups, _noise_scale


class StepStatistics:
    """Callable `(grads, scale, before, after, half) -> [values of log_names..., estimates, 1.0]` (in-step).

    The values come key-major (`_groups.log_names`), followed by the step's weight 1.0 for
    `GradientNormMetric`. The table is a float32 tensor traced into the step (TensorFlow, JAX, PyTorch
    on an accelerator: `keras.ops`), or a float64 numpy array on PyTorch's CPU (then numpy on a few
    numbers; the values reach the metric as Python floats). Per group of weights (the global row, then
    one row per layer), with s the loss-scale factor:

    - grad_norm = sqrt(sum sq) / s;
    - grad_norm_clipped: as the optimizer clips the unscaled gradient (Keras' order: `clipnorm` per
      weight, min(|g_w|, c); else `global_clipnorm`, every gradient times c / max(|g|, c); else
      `clipvalue`, elementwise clip to [-c, c]); clip_fraction: 1.0 when clipping changed a gradient of
      the group, else 0.0 (its mean over steps is the share of steps clipped);
    - param_norm = sqrt(sum param_sq); update_norm = sqrt(sum update_sq); update_ratio = their ratio
      (inf or NaN for weights that are all zero);
    - grad_max = max |g| / s; grad_nonfinite = the count of NaN/inf entries; grad_zero_fraction = the
      share of exact zeros;
    - noise_scale: a placeholder (0), followed after all the keys by the step's estimates of |G|^2 and
      tr(Sigma) per row (`_noise_scale.estimates`); the metric smooths them and fills in the ratio.

    `half`: None, or `(full, g1, b1, b, half_scale[, g2])` for "noise_scale": the step's own gradients (as
    the backend gave them), the gradients of the batch's first b1 of b rows, their loss-scale factor, and
    (where the backend took the step's gradient as its halves') the gradients of the other rows.

    Args:
        groups: tuple of group names (`_groups.check_include`).
        rows: list of lists of int, the weight indices of each layer (`layer_groups`); the global row
            (every weight) is added first.
        shapes: the trainable weights' shapes.
        optimizer: the optimizer that clips (inside a LossScaleOptimizer, the inner one).
    """

    def __init__(self, groups, rows, shapes, optimizer):
        self.groups, self.shapes = groups, [tuple(s) for s in shapes]
        n = len(self.shapes)
        matrix = np.zeros((1 + len(rows), n), np.float32)
        matrix[0] = 1.0
        for r, row in enumerate(rows, start=1):
            matrix[r, row] = 1.0
        self.matrix = matrix
        self.sizes = matrix @ np.array([np.prod(s) for s in self.shapes], np.float32)
        self.clip = _clip_setting(optimizer)
        clipvalue = self.clip[1] if self.clip and self.clip[0] == "clipvalue" else None
        self.columns = _groups.columns(groups, clipvalue)
        self.noise = _groups.needs_halves(groups)
        self.size = (len(_groups.keys(groups)) + 2 * self.noise) * matrix.shape[0] + 1
        self.needs_weights = _groups.needs_weights(groups)

    def __call__(self, grads, scale=None, before=None, after=None, half=None):
        clip = None
        if "clip_sq" in self.columns:
            clip = self.clip[1] * (1.0 if scale is None else scale)
        rows = None if half is None else (*half[:4], *half[5:])
        table = backend.weight_stats(grads, before, after, self.columns, self.shapes, clip, half=rows)
        host = isinstance(table, np.ndarray)
        ops = np if host else keras.ops
        matrix = self.matrix if host else keras.ops.convert_to_tensor(self.matrix)
        parts = _derive(self, ops, matrix, table, 1.0 if scale is None else scale)
        if self.noise:
            sums = {c: ops.matmul(matrix, table[:, self.columns.index(c)]) for c in _NOISE_COLUMNS}
            parts.extend(_noise_scale.estimates(ops, sums, half[2], half[3], half[4]))
        if host:
            return [float(v) for part in parts for v in part] + [1.0]
        return keras.ops.concatenate([*parts, keras.ops.ones((1,), "float32")])


_NOISE_COLUMNS = ("full_sq", "half_sq", "other_sq")


def _clip_setting(optimizer):
    """`(kind, threshold)` of the optimizer's clipping in Keras' order of precedence, or None."""
    for kind in ("clipnorm", "global_clipnorm", "clipvalue"):
        value = getattr(optimizer, kind, None)
        if value:
            return kind, float(value)
    return None


def _derive(stats, ops, matrix, table, scale):
    """The log values, one vector per key (rows: global, then layers)."""
    col = {name: table[:, i] for i, name in enumerate(stats.columns)}
    sums = {name: ops.matmul(matrix, col[name]) for name in stats.columns if name != "max"}
    parts = []
    if "norm" in stats.groups or "clipped" in stats.groups:
        grad_norm = ops.sqrt(sums["sq"]) / scale
    if "norm" in stats.groups:
        parts.append(grad_norm)
    if "clipped" in stats.groups:
        parts.extend(_clipped(stats, ops, matrix, col, grad_norm, scale))
    if "params" in stats.groups or "updates" in stats.groups:
        param_norm = ops.sqrt(sums["param_sq"])
    if "params" in stats.groups:
        parts.append(param_norm)
    if "updates" in stats.groups:
        update_norm = ops.sqrt(sums["update_sq"])
        parts.extend([update_norm, update_norm / param_norm])
    if "health" in stats.groups:
        grad_max = ops.max(ops.where(matrix > 0, col["max"][None, :], 0.0), axis=1) / scale
        parts.extend([grad_max, sums["nonfinite"], sums["zeros"] / stats.sizes])
    if "noise_scale" in stats.groups:
        parts.append(matrix[:, 0] * 0.0)  # filled in by the metric (the smoothed ratio)
    return parts


def _clipped(stats, ops, matrix, col, grad_norm, scale):
    """`grad_norm_clipped` and the clip indicator of each row (see `StepStatistics`)."""
    if stats.clip is None:
        return [grad_norm, grad_norm * 0.0]
    kind, c = stats.clip
    if kind == "global_clipnorm":
        factor = c / ops.maximum(grad_norm[0], c)
        fired = ops.where((grad_norm[0] > c) & (grad_norm > 0), 1.0, 0.0)
        return [grad_norm * factor, fired]
    if kind == "clipnorm":
        squares = col["sq"] / (scale * scale)
        clipped = ops.sqrt(ops.matmul(matrix, ops.minimum(squares, c * c)))
        changed = ops.where(squares > c * c, 1.0, 0.0)
    else:  # clipvalue
        clipped = ops.sqrt(ops.matmul(matrix, col["clip_sq"])) / scale
        changed = ops.where(col["max"] / scale > c, 1.0, 0.0)
    return [clipped, ops.where(ops.matmul(matrix, changed) > 0, 1.0, 0.0)]
