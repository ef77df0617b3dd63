"""PyTorch's in-step norms and per-weight statistics, run eagerly after the optimizer's update.

On the CPU the in-step values are summed on the host (`_HOST_ON_CPU`): the norms are lists of Python
floats and the statistics a float64 numpy table; on an accelerator they stay float32 tensors there
(`common/norm_values.py`). The loss scale the step reads comes the same way (`loss_scale`).
"""

import math

import torch

from gradkit import _keras_internals
from gradkit.backend.common import norm_values
from gradkit.backend.common.train_steps import build_optimizer
from gradkit.backend.torch import weight_stats as stats

# On CPU the in-step norms are summed on the host (`group_norms`); False: in tensors, as on an accelerator.
_HOST_ON_CPU = True

divide_norms = norm_values.divide_norms
applied_norms = norm_values.applied_norms
norm_means = norm_values.norm_means


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])` for `grads` that need no autograd graph.

    One BLAS dot per gradient on a flat view (no copy). On CPU the rest is plain Python on a few
    numbers: each square comes to the host with `item()`, and the result is a list of Python floats
    (float64 sums); right after a training step's kernels every small tensor operation costs more than
    the arithmetic it does, so a tensor result's stack, product, square root, metric update and result
    would cost more than the dots. On an accelerator, where `item()` would wait for the device, the
    result is a float32 tensor computed there.

    Args:
        grads: the n dense gradients.
        matrix: the constant float32 0/1 matrix `(k, n + 1)`.
        last: the last squared entry (1, or the squared loss scale; a float or a tensor).

    Returns:
        k Python floats (a list) on the CPU, else a float32 tensor `(k,)`.
    """
    squares = []
    for g in grads:
        g = g if g.dtype == torch.float32 else g.float()
        g = g if g.ndim == 1 else g.reshape(-1)
        squares.append(torch.dot(g, g))
    if _HOST_ON_CPU and matrix.device.type == "cpu":
        host = [square.item() for square in squares]
        host.append(last.item() if isinstance(last, torch.Tensor) else float(last))
        return [math.sqrt(sum(host[k] for k in row)) for row in _rows(matrix)]
    if not isinstance(last, torch.Tensor):
        last = torch.as_tensor(last, dtype=torch.float32, device=matrix.device)
    squares.append(last)
    return torch.mv(matrix, torch.stack(squares)).sqrt_()


def _rows(matrix):  # the column indices of the ones in each row of the constant 0/1 `matrix`
    rows = getattr(matrix, "_gradkit_rows", None)
    if rows is None:
        rows = matrix._gradkit_rows = [torch.nonzero(row).flatten().tolist() for row in matrix]
    return rows


def _on_host():  # where the in-step values are summed on the host (see `group_norms`)
    return _HOST_ON_CPU and str(_keras_internals.torch_device()) == "cpu"


def weight_stats(grads, before, after, columns, shapes, clip=None, half=None):
    """The per-weight statistics (`weight_stats.py`): a float64 numpy table on the CPU, else a tensor."""
    return stats.weight_stats(grads, before, after, columns, shapes, clip, host=_on_host(), half=half)


def cond(predicate, true_fn, size):
    """`true_fn()` if `predicate` (a Python bool: the step runs eagerly), else `size` zeros."""
    if predicate:
        return true_fn()
    return [0.0] * size if _on_host() else torch.zeros(size, device=_keras_internals.torch_device())


def assign_add(variable, value):
    """`variable += value` in place, without the per-call checks of `KerasVariable.assign`."""
    with torch.no_grad():
        variable.value.add_(value)


add_norms = norm_values.norm_adder(assign_add)


def loss_scale(optimizer, trainable_variables):
    """The step's loss scale (None, a float, or a tensor), a Python float where the norms are host
    values; the optimizer is built first (a LossScaleOptimizer creates its `dynamic_scale` then)."""
    build_optimizer(optimizer, trainable_variables)
    if hasattr(optimizer, "dynamic_scale"):
        scale = optimizer.dynamic_scale.value.detach()
        return scale.item() if _HOST_ON_CPU and scale.device.type == "cpu" else scale  # as the norms
    return optimizer.loss_scale_factor  # None or a float
