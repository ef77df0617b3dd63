"""Per-weight statistics of a training step on PyTorch (see `common/weight_stats.py` for the columns).

Eager PyTorch runs each tensor operation as called, so the L2 norms use the multi-tensor kernel
(`torch._foreach_norm`: one call for every weight) rather than a few operations per weight. On the CPU
the max |g| and the count of zeros are one `torch.aminmax` and one sum of |sign(g)| per weight:
`_foreach_norm` of order inf and 0 has no vectorized CPU kernel; on an accelerator they stay
multi-tensor kernels. A non-finite entry is the one non-zero of `g - g` (inf - inf and NaN - NaN are
NaN), counted only where a squared norm is not finite. The gradient of the other rows of the noise scale
is one `_foreach_add` (`full - (b1 / b) g1`, times `b / (b - b1)`), not three passes. On the CPU the
table comes to the host once, as a float64 numpy array (the rest is arithmetic on a few numbers); on an
accelerator it stays there.
"""

import math

import numpy as np
import torch


def _norms(tensors, order):
    return torch.stack(torch._foreach_norm(tensors, order))


def _max_abs(tensors):
    """max |t| of each tensor (0 for an empty one), one pass each: the larger of -min and max."""
    out = []
    for t in tensors:
        if t.numel() == 0:
            out.append(t.new_zeros(()))
            continue
        low, high = torch.aminmax(t)
        out.append(torch.maximum(-low, high))
    return torch.stack(out)


def _count_nonzero(tensors, finite):
    """The count of non-zero entries of each tensor on the CPU: the sum of |sign(t)| (one branch-free
    pass) where every entry is finite and the count is exact in float32 (at most 2**24 entries);
    else `torch.count_nonzero`, which branches per entry (several times slower on a CPU)."""
    counts = []
    for t in tensors:
        if finite and t.numel() <= 2**24:
            counts.append(t.sign().abs_().sum())
        else:
            counts.append(torch.count_nonzero(t).float())
    return torch.stack(counts)


def _columns(grads, before, after, columns, clip, half):
    out = {}
    needs_grads = [c for c in columns if c not in ("param_sq", "update_sq")]
    if needs_grads:
        out["sq"] = _norms(grads, 2.0).square()
        cpu = grads[0].device.type == "cpu"
        if "max" in columns:
            out["max"] = _max_abs(grads) if cpu else _norms(grads, math.inf)
        finite = None
        if "nonfinite" in columns or ("zeros" in columns and cpu):  # one check for both
            finite = bool(torch.isfinite(out["sq"]).all())
        if "zeros" in columns:
            sizes = torch.tensor([g.numel() for g in grads], device=grads[0].device)
            nonzero = _count_nonzero(grads, finite) if cpu else _norms(grads, 0.0)
            out["zeros"] = sizes - nonzero
        if "nonfinite" in columns:  # counted only where a squared norm is not finite
            out["nonfinite"] = out["sq"] * 0.0 if finite else _norms(torch._foreach_sub(grads, grads), 0.0)
        if "clip_sq" in columns:
            out["clip_sq"] = _norms([g.clamp(-clip, clip) for g in grads], 2.0).square()
    if half is not None:
        full, g1, b1, b = half
        out["full_sq"] = _norms(full, 2.0).square()
        out["half_sq"] = _norms(g1, 2.0).square()
        # g2 = (b full - b1 g1) / (b - b1) = (full - (b1 / b) g1) * b / (b - b1): one pass, one buffer.
        others = torch._foreach_add(full, g1, alpha=-float(b1) / float(b))
        out["other_sq"] = (_norms(others, 2.0) * (float(b) / float(max(b - b1, 1)))).square()
    if "param_sq" in columns:
        out["param_sq"] = _norms(before, 2.0).square()
    if "update_sq" in columns:  # in place: `before` is the caller's scratch copy (`train_step.Snapshot`)
        torch._foreach_sub_(before, after)
        out["update_sq"] = _norms(before, 2.0).square()
    return torch.stack([out[c].float() for c in columns], dim=1)


def weight_stats(grads, before, after, columns, shapes, clip=None, host=True, half=None):
    """The `(n, len(columns))` table: float64 numpy on the host (`host`), else a float32 tensor.

    `before` is scratch: "update_sq" overwrites it (with the update). `shapes`: the weights' shapes (a
    None gradient is a zero tensor of its weight's shape). `half`: None, or `(full, g1, b1, b)` for the
    noise-scale columns (see `common/weight_stats.py`; b1 < b, ints).
    """
    with torch.no_grad():
        device = next((g.device for g in grads if g is not None), None)
        grads = [torch.zeros(s, device=device) if g is None else g.float() for g, s in zip(grads, shapes)]
        before = None if before is None else [w.float() for w in before]
        after = None if after is None else [w.float() for w in after]
        if half is not None:
            full, g1, b1, b = half
            full = [torch.zeros(s, device=device) if t is None else t.float() for t, s in zip(full, shapes)]
            g1 = [torch.zeros(s, device=device) if t is None else t.float() for t, s in zip(g1, shapes)]
            half = (full, g1, b1, b)
        table = _columns(grads, before, after, columns, clip, half)
    return table.cpu().numpy().astype(np.float64) if host else table
