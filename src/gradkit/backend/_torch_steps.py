"""PyTorch backend: an attack's Linf step computed in the memory of its own gradient.

On PyTorch the compiled attack step runs its update eagerly (`compile_step`), one full-size tensor per
operation. On the CPU a fresh large tensor comes from the C allocator, which hands the pages of freed
ones back to the system and faults new ones in: at 1,024x32x32x3 float32 a step of PGD allocated 4 to 8
such tensors and took 3 to 8 page faults per kilobyte in some runs and none in others (each 12 MB tensor
costs 2 to 3 ms of faults on a 2-core VM, about the whole forward and backward pass of a small model).
The step's gradient is a tensor of the iterate's shape that nothing else holds, so the move, the
projection and the clip are done in it: the same operations in the same order, hence the same values,
and one allocation per step (the gradient itself) instead of eight.
"""

import torch


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
    if not g.is_contiguous() or g.data_ptr() in (x.data_ptr(), x0.data_ptr()):
        g = g.clone(memory_format=torch.contiguous_format)
    eps = eps.to(g.dtype)
    g.sign_().mul_(size.to(g.dtype)).add_(x).sub_(x0)
    torch.minimum(torch.maximum(g, -eps, out=g), eps, out=g).add_(x0)
    if bounds is not None:
        torch.minimum(torch.maximum(g, bounds[0].to(g.dtype), out=g), bounds[1].to(g.dtype), out=g)
    return g
