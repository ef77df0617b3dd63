"""Numpy oracles of IBP and CROWN for a ReLU network of dense layers (test reference only).

Written from the papers' equations, independently of `gradkit.certificates`: Gowal et al. (2018) eq. (6) for
IBP; Zhang et al. (2018) Theorem 3.2 for CROWN, its intermediate bounds by CROWN itself, the adaptive
lower slope (1 where up >= -lo), the Linf ball without a box.
"""

import numpy as np


def ibp_layers(weights, x0, eps):
    """`[(lo, up)]` of every layer's output before its ReLU; `weights` [(W (d_in, d_out), b)]."""
    lo, up, out = x0 - eps, x0 + eps, []
    for w, b in weights:
        mu, r = (lo + up) / 2, (up - lo) / 2
        lo, up = mu @ w + b - r @ np.abs(w), mu @ w + b + r @ np.abs(w)
        out.append((lo, up))
        lo, up = np.maximum(lo, 0), np.maximum(up, 0)
    return out


def ibp(weights, x0, eps):
    """`(lo, up)` of the logits (the last layer has no ReLU)."""
    return ibp_layers(weights, x0, eps)[-1]


def _slopes(lo, up):
    mixed = (lo < 0) & (up > 0)
    slope_up = np.where(up <= 0, 0.0, np.where(lo >= 0, 1.0, up / np.where(mixed, up - lo, 1.0)))
    up_b = np.where(mixed, -slope_up * lo, 0.0)
    low = np.where(up <= 0, 0.0, np.where(lo >= 0, 1.0, (up >= -lo).astype(float)))
    return low, slope_up, up_b


def _backward(weights, pre, spec, x0, eps):
    """Lower bound of spec . z_K, z_K the output of layer len(weights) - 1 (before its ReLU)."""
    a, const = spec, 0.0
    for k in range(len(weights) - 1, -1, -1):
        w, b = weights[k]
        const = const + a @ b
        a = a @ w.T  # coefficient of layer k's input
        if k:  # through the ReLU of layer k - 1
            low, up, up_b = _slopes(*pre[k - 1])
            const = const + np.minimum(a, 0) @ up_b
            a = np.maximum(a, 0) * low + np.minimum(a, 0) * up
    return a @ x0 - eps * np.abs(a).sum(-1) + const


def crown(weights, x0, eps):
    """`(lo, up)` of the logits for one point `x0` `(d,)`; every layer's bounds intersected with IBP's, the
    logits' also with IBP of the last layer on the CROWN bounds of its input."""
    pre, boxes = [], ibp_layers(weights, x0, eps)
    for k in range(len(weights)):
        eye = np.eye(weights[k][0].shape[1])
        part = weights[: k + 1]
        low, high = _backward(part, pre, eye, x0, eps), -_backward(part, pre, -eye, x0, eps)
        pre.append((np.maximum(low, boxes[k][0]), np.minimum(high, boxes[k][1])))
    (w, b), (lo, up) = weights[-1], (np.maximum(p, 0) for p in pre[-2])  # IBP of the last layer on these
    mu, r = (lo + up) / 2, (up - lo) / 2
    return np.maximum(pre[-1][0], mu @ w + b - r @ np.abs(w)), np.minimum(
        pre[-1][1], mu @ w + b + r @ np.abs(w)
    )
