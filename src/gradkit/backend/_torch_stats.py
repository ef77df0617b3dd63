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

from gradkit.backend._halves import first_half, half_loss


def _norms(tensors, order):
    return torch.stack(torch._foreach_norm(tensors, order))


def _columns(grads, before, after, columns, clip, half):
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
    if half is not None:
        full, g1, b1, b = half
        out["full_sq"] = _norms(full, 2.0).square()
        out["half_sq"] = _norms(g1, 2.0).square()
        others = torch._foreach_div(
            torch._foreach_sub(torch._foreach_mul(full, float(b)), torch._foreach_mul(g1, float(b1))),
            float(max(b - b1, 1)),
        )
        out["other_sq"] = _norms(others, 2.0).square()
    if "param_sq" in columns:
        out["param_sq"] = _norms(before, 2.0).square()
    if "update_sq" in columns:
        out["update_sq"] = _norms(torch._foreach_sub(after, before), 2.0).square()
    return torch.stack([out[c].float() for c in columns], dim=1)


def weight_stats(grads, before, after, columns, shapes, clip=None, host=True, half=None):
    """The `(n, len(columns))` table: float64 numpy on the host (`host`), else a float32 tensor.

    `shapes`: the weights' shapes (a None gradient is a zero tensor of its weight's shape). `half`: None,
    or `(full, g1, b1, b)` for the noise-scale columns (see `_weight_stats.py`; b1 < b, ints).
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


def half_gradients(model, data, variables, scale):
    """`(g1, b1, b)`: the gradient of the loss on the first half of `data` at the current weights, scaled
    by `scale` as the step's own (`_halves.py`); taken before the update writes the weights."""
    half, b1, b = first_half(data)
    trainable = [v.value for v in variables]
    if b1 == 0:  # a batch of one row: no half (the caller refuses it or leaves the step out)
        return [torch.zeros_like(t) for t in trainable], 0, int(b)
    non_trainable = [v.value.detach() for v in model.non_trainable_variables]
    metrics = [v.value.detach() for v in model.metrics_variables]
    with torch.enable_grad():
        loss = half_loss(model, trainable, non_trainable, metrics, half, scale)
        grads = torch.autograd.grad(loss, trainable, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(trainable, grads)], int(b1), int(b)


def halves(model, data, norms_fn, variables, scale):
    """`{"halves": thunk}` for a `norms_fn` that needs the halves' gradient (else {}): taken now, on
    sampled steps, before the update writes the weights in place; a batch the caller refuses
    (`norms_fn.check_rows`) raises here, before the update."""
    if not getattr(norms_fn, "needs_halves", False):
        return {}
    taken = half_gradients(model, data, list(variables), scale) if norms_fn.sampled() else None
    if taken is not None:
        norms_fn.check_rows(taken[2])
    return {"halves": lambda: taken}
