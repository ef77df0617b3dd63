"""Per-weight statistics of a training step on PyTorch (see `_weight_stats.py` for the columns).

Eager PyTorch runs each tensor operation as called, so the statistics use the multi-tensor kernels
(`torch._foreach_norm`: one call for every weight's L2 norm, one for every max |g|, an order-0 norm
for the count of non-zeros) rather than a few operations per weight. A non-finite entry is the one
non-zero of `g - g` (inf - inf and NaN - NaN are NaN), counted only where a squared norm is not
finite. On the CPU the table comes to the host once, as a float64 numpy array (the rest is arithmetic
on a few numbers); on an accelerator it stays there.
"""

import math

import numpy as np
import torch


def _norms(tensors, order):
    return torch.stack(torch._foreach_norm(tensors, order))


def _columns(grads, before, after, columns, clip):
    out = {}
    needs_grads = [c for c in columns if c not in ("param_sq", "update_sq")]
    if needs_grads:
        out["sq"] = _norms(grads, 2.0).square()
        if "max" in columns:
            out["max"] = _norms(grads, math.inf)
        if "zeros" in columns:
            sizes = torch.tensor([g.numel() for g in grads], device=grads[0].device)
            out["zeros"] = sizes - _norms(grads, 0.0)
        if "nonfinite" in columns:  # counted only where a squared norm is not finite (one check)
            finite = bool(torch.isfinite(out["sq"]).all())
            out["nonfinite"] = out["sq"] * 0.0 if finite else _norms(torch._foreach_sub(grads, grads), 0.0)
        if "clip_sq" in columns:
            out["clip_sq"] = _norms([g.clamp(-clip, clip) for g in grads], 2.0).square()
    if "param_sq" in columns:
        out["param_sq"] = _norms(before, 2.0).square()
    if "update_sq" in columns:
        out["update_sq"] = _norms(torch._foreach_sub(after, before), 2.0).square()
    return torch.stack([out[c].float() for c in columns], dim=1)


def weight_stats(grads, before, after, columns, shapes, clip=None, host=True):
    """The `(n, len(columns))` table: float64 numpy on the host (`host`), else a float32 tensor.

    `shapes`: the weights' shapes (a None gradient is a zero tensor of its weight's shape).
    """
    with torch.no_grad():
        device = next((g.device for g in grads if g is not None), None)
        grads = [torch.zeros(s, device=device) if g is None else g.float() for g, s in zip(grads, shapes)]
        before = None if before is None else [w.float() for w in before]
        after = None if after is None else [w.float() for w in after]
        table = _columns(grads, before, after, columns, clip)
    return table.cpu().numpy().astype(np.float64) if host else table
