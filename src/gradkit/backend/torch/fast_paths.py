"""PyTorch's fast paths: an attack's Linf steps computed in the memory of their own gradient.

On PyTorch the compiled attack step runs its update eagerly (`compile_step`), one full-size tensor per
operation. On the CPU a fresh large tensor comes from the C allocator, which hands the pages of freed
ones back to the system and faults new ones in, at a cost comparable to a small model's whole forward
and backward pass. The step's gradient is a tensor of the iterate's shape that nothing else holds, so
the move, the projection and the clip are done in it: the same operations in the same order, hence the
same values, and one allocation per step (the gradient itself) instead of eight. APGD's step
(`apgd_linf_step`: the move, the momentum mix, two projections and the selection of the rows attacked)
needs one more buffer instead of some twenty. TensorFlow and JAX, whose compiled steps fuse or plan
their buffers, have none (their `fast_paths.py` sets these names to None).
"""

import torch


def _own(g, *others):
    """`g`, or a contiguous copy where it is not laid out contiguously (such as the expanded gradient of a
    sum) or shares memory with one of `others`."""
    if not g.is_contiguous() or g.data_ptr() in [t.data_ptr() for t in others]:
        return g.clone(memory_format=torch.contiguous_format)
    return g


def _project(t, x0, eps, bounds):
    """`t <- clip(x0 + clip(t - x0, -eps, eps), lo, hi)` in place (`eps`, `bounds` of `t`'s dtype)."""
    t.sub_(x0)
    torch.minimum(torch.maximum(t, -eps, out=t), eps, out=t).add_(x0)
    if bounds is not None:
        torch.minimum(torch.maximum(t, bounds[0], out=t), bounds[1], out=t)
    return t


def _cast_bounds(bounds, dtype):
    return None if bounds is None else (bounds[0].to(dtype), bounds[1].to(dtype))


def linf_step(x, x0, g, size, eps, bounds):
    """`clip(x0 + clip(x + size * sign(g) - x0, -eps, eps), lo, hi)` written into `g` and returned.

    Args:
        x, x0: the iterate and the clean input, float tensors of `g`'s shape (read only).
        g: the step's gradient w.r.t. `x`, overwritten (copied first where autograd returned a tensor
            that is not laid out contiguously, such as the expanded gradient of a sum, or one that
            shares memory with `x` or `x0`).
        size, eps: 0-d tensors, the step size (negative for a descent) and the radius.
        bounds: None or `(lo, hi)` 0-d tensors, the valid range.

    Returns:
        `g`, holding the next iterate: equal to `geometry.project_and_clip_tensor(x + size *
        sign(g), x0, eps, inf, bounds)` (the same PyTorch kernels, whose operands commute).
    """
    g = _own(g, x, x0)
    g.sign_().mul_(size.to(g.dtype)).add_(x)
    return _project(g, x0, eps.to(g.dtype), _cast_bounds(bounds, g.dtype))


def apgd_linf_step(x, x_prev, x0, g, eta, a, eps, bounds, active):
    """APGD's Linf proposal (Croce & Hein 2020, Algorithm 1) on the rows `active`, in `g`'s memory.

    `z = P(x + eta * sign(g))`, then `P(x + a * (z - x) + (1 - a) * (x - x_prev))`, `P` the projection
    onto the eps-ball around `x0` and the clip; rows not `active` keep `x`. The next previous iterate is
    `x` itself for every row (one that stops is never moved again, so it never reads it).

    Args:
        x, x_prev, x0: the iterate, the previous iterate and the clean input `(n, ...)` (read only).
        g: the gradient (direction) `(n, ...)`, overwritten (copied first as in `linf_step`).
        eta: float32 `(n,)`, the step size per row.
        a: 0-d tensor, the weight of the new point (1 at the first step, else the momentum).
        eps: 0-d tensor, the radius; bounds: None or `(lo, hi)` 0-d tensors, the valid range.
        active: bool `(n,)`, the rows that move.

    Returns:
        `(x_next, x)`: `x_next` in `g`'s memory (one scratch tensor besides), the values of
        `_apgd_device._propose`'s `keras.ops` (the same kernels, whose operands commute).
    """
    g = _own(g, x, x_prev, x0)
    n, dtype = g.shape[0], g.dtype
    eps, bounds, a = eps.to(dtype), _cast_bounds(bounds, dtype), a.to(dtype)
    g.sign_().view(n, -1).mul_(eta.to(dtype).view(n, 1))
    _project(g.add_(x), x0, eps, bounds)  # z
    g.sub_(x).mul_(a).add_(x)  # x + a * (z - x)
    scratch = torch.sub(x, x_prev, out=torch.empty_like(g)).mul_(1 - a)
    _project(g.add_(scratch), x0, eps, bounds)
    flat = (n, -1)
    torch.where(active.view(n, 1), g.view(flat), x.reshape(flat), out=g.view(flat))
    return g, x


def linf_window(best, ends, in_rows, in_cols, tolerance, signs):
    """The Square Attack's Linf candidate (`_square_ops.linf_proposal`) in one new tensor.

    The window is the product of its rows and its columns; broadcast as `(n, h, 1, 1)` and `(n, 1, w, 1)`
    masks over a channels-last image, PyTorch's elementwise kernels run an inner loop of `c` (3)
    elements (more than twice as slow as without broadcasting), so the image is seen as `(n, h, w * c)`
    and the masks as `(n, h, 1)` and `(n, 1, w * c)`.

    Args:
        best: the current points `(n, h, w, c)` (read only); ends: the two clipped corners `[x0 + eps,
            x0 - eps]` of its shape.
        in_rows, in_cols: bool `(n, h)` and `(n, w)`: the rows and the columns of each sample's window.
        tolerance: 0-d tensor: a window "already holds" a corner in a channel where the sum of
            `|corner - best|` over the window is below it.
        signs: `signs(unchanged) -> plus`: from whether each corner leaves the window as it is
            (`[(n, c) bool] * 2`), the channels that take the `+` corner, bool `(n, c)`.

    Returns:
        `where(window, where(plus, ends[0], ends[1]), best)`, the values of the `keras.ops` path
        (the same sums: `|corner - best|` times the 0/1 mask, summed over the image's axes 1 and 2).
    """
    n, h, w, c = best.shape
    d = torch.empty_like(best, memory_format=torch.contiguous_format)
    flat = d.view(n, h, w * c)
    rows = in_rows.view(n, h, 1)
    cols = in_cols.view(n, w, 1).expand(n, w, c).reshape(n, 1, w * c)
    rows_f, cols_f = rows.to(d.dtype), cols.to(d.dtype)
    unchanged = []
    for end in ends:
        torch.sub(end, best, out=d).abs_()
        flat.mul_(rows_f).mul_(cols_f)
        unchanged.append(torch.sum(d, dim=(1, 2)) < tolerance)
    plus = signs(unchanged).view(n, 1, c).expand(n, w, c).reshape(n, 1, w * c)
    torch.where(plus, ends[0].reshape(n, h, w * c), ends[1].reshape(n, h, w * c), out=flat)
    torch.where(rows & cols, flat, best.reshape(n, h, w * c), out=flat)
    return d
