"""The Square Attack's proposals (Andriushchenko et al. 2020): starts and square-window updates, numpy.

- Linf (Algorithm 1): start from vertical stripes `x0 + eps * s`, `s in {-1, 1}` per (column, channel);
  a proposal sets a random window to `x0 +- eps` (one sign per channel). As in the authors' code, the
  signs are redrawn (up to 8 times) when the proposal would not change the window.
- L2 (Algorithm 3): start from a grid of tiles carrying the "pseudo-Gaussian" bumps `eta` with random
  signs per (tile, channel), scaled to the eps-sphere; a proposal moves the perturbation mass of a second
  window into the first, adds a bump there, and rescales the whole perturbation to norm eps.
- L1 (AutoAttack's `square.py` L1 branch, Croce & Hein 2021): the L2 scheme with bumps weighted
  `1/(k+1)^4` of unit L1 norm; the start and each proposal are projected exactly onto the L1-ball and
  the box (`_l1_box`) instead of rescaled.
- Window side `s = round(sqrt(p * h * w))` (L2, L1: at least 3 and odd), cut to the image.

Windows are drawn per sample (the authors' L2 code draws one window for the whole batch). Images are
`(n, h, w, c)` channels-last (`_square.as_image`).

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (reference code:
    max-andr/square-attack `attack.py`, fra31/auto-attack `autoattack/square.py`).
"""

import numpy as np

from gradkit.attacks import _geometry as geometry

_REDRAWS = 8  # Linf: sign redraws when a proposal leaves the window unchanged


def _bumps(a, b, norm=2):
    """Concentric rectangles `(a, b)` weighted `sum_{k >= d} 1/(k+1)^2` (L1: `^4`), d the Chebyshev
    distance to the centre `(a // 2, b // 2)`; unit L2 (L1) norm (zeros when a side is 0)."""
    if a == 0 or b == 0:
        return np.zeros((a, b))
    dist = np.maximum(np.abs(np.arange(a) - a // 2)[:, None], np.abs(np.arange(b) - b // 2)[None, :])
    weights = 1.0 / (np.arange(max(a, b) // 2 + 1) + 1.0) ** (4 if norm == 1 else 2)
    out = np.cumsum(weights[::-1])[::-1][dist]
    return out / np.linalg.norm(out.ravel(), ord=norm)


def eta(a, b, norm=2):
    """The update pattern `(a, b)`: a bump and its negative side by side along the longer side, of unit
    L2 norm (L1 with `norm=1`)."""
    if a < b:
        return eta(b, a, norm).T
    out = np.concatenate([_bumps(a // 2, b, norm), -_bumps(a - a // 2, b, norm)], axis=0)
    return out / np.linalg.norm(out.ravel(), ord=norm)


def _window(p, h, w, minimum=1, odd=False):
    """The window sides `(sh, sw)` for the fraction `p` of an `h x w` image."""
    s = max(int(round(np.sqrt(p * h * w))), minimum)
    s += int(odd and s % 2 == 0)
    return min(s, h), min(s, w)


def _corners(n, h, w, sh, sw, rng):
    """Random per-sample window corners `(top (n,), left (n,))` of `sh x sw` windows in `h x w`."""
    return rng.integers(0, h - sh + 1, size=n), rng.integers(0, w - sw + 1, size=n)


def _windows(n, h, w, sh, sw, rng):
    """Random per-sample windows: `(mask (n, h, w) bool, rows (n, h), cols (n, w))`, the offsets of
    each pixel from its sample's window corner."""
    top, left = _corners(n, h, w, sh, sw, rng)
    rows, cols = np.arange(h)[None, :] - top[:, None], np.arange(w)[None, :] - left[:, None]
    mask = ((rows >= 0) & (rows < sh))[:, :, None] & ((cols >= 0) & (cols < sw))[:, None, :]
    return mask, rows, cols


def _place(patterns, n, h, w, sh, sw, rng):
    """Random per-sample windows: returns `(mask (n, h, w, 1) bool, pattern values (n, h, w, 1))`.

    `patterns` is `(k, sh, sw)`; each sample gets one of them (chosen at random) in its window."""
    mask, rows, cols = _windows(n, h, w, sh, sw, rng)
    pick = rng.integers(0, len(patterns), size=n)[:, None, None]
    values = patterns[pick, np.clip(rows, 0, sh - 1)[:, :, None], np.clip(cols, 0, sw - 1)[:, None, :]]
    return mask[..., None], (values * mask)[..., None]


def _signs(rng, shape):
    """Random signs in {-1.0, 1.0} (`rng.integers(0, 2)` mapped; the stream of `rng.choice([-1, 1])`)."""
    return rng.integers(0, 2, size=shape) * 2.0 - 1.0


def linf_init(x0, eps, rng):
    """Vertical stripes: `x0 + eps * s`, one sign per (sample, column, channel)."""
    n, _, w, c = x0.shape
    return x0 + (eps * _signs(rng, (n, 1, w, c))).astype(x0.dtype)


def l2_init(x0, eps, rng, norm=2):
    """Tiles of side `min(h, w) // 5` carrying `eta` with random signs per (sample, tile, channel),
    scaled to the L2 eps-sphere (L1, `norm=1`: the L1 patterns, each tile of unit L1 norm, left for the
    caller's projection onto the L1-ball and the box, as AutoAttack's L1 start)."""
    n, h, w, c = x0.shape
    s = max(min(h, w) // 5, 1)
    nh, nw = h // s, w // s
    tiles = np.stack([eta(s, s, norm), eta(s, s, norm).T])[rng.integers(0, 2, size=(nh, nw))]
    grid = tiles.transpose(0, 2, 1, 3).reshape(nh * s, nw * s)
    signs = np.repeat(np.repeat(_signs(rng, (n, nh, nw, c)), s, axis=1), s, axis=2)
    delta = np.zeros(x0.shape)
    oh, ow = (h - nh * s) // 2, (w - nw * s) // 2
    delta[:, oh : oh + nh * s, ow : ow + nw * s] = grid[None, :, :, None] * signs
    if norm == 1:
        return x0 + delta.astype(x0.dtype)
    return x0 + (eps * delta / np.maximum(geometry.per_sample_norm(delta), geometry.TINY)).astype(x0.dtype)


def linf_ends(x0, eps, clip_values):
    """The two corners `[x0 + eps, x0 - eps]`, each projected and clipped, that Linf windows take."""
    e = x0.dtype.type(eps)
    return [geometry.project_and_clip(x0 + e * s, x0, eps, np.inf, clip_values) for s in (1, -1)]


_OFFSETS = {}  # (sh, sw, w) -> int (sh * sw,): flat pixel offsets of a window from its corner


def _window_pixels(n, h, w, sh, sw, rng):
    """Random per-sample windows as flat pixel indices `(n, sh * sw)` into `h * w`."""
    top, left = _corners(n, h, w, sh, sw, rng)
    if (sh, sw, w) not in _OFFSETS:
        _OFFSETS[sh, sw, w] = (np.arange(sh)[:, None] * w + np.arange(sw)[None, :]).ravel()
    return (top * w + left)[:, None] + _OFFSETS[sh, sw, w]


def linf_proposal(x_best, x0, eps, p, rng, clip_values, ends=None):
    """Sets a random window of each sample to `x0 +- eps` (one sign per channel), then clips; `ends`
    is `linf_ends(x0, eps, clip_values)` when the caller keeps it.

    A sample whose signs would leave its window as it is gets new signs, up to `_REDRAWS` draws in
    all (the authors' loop): the draws are made at once and the first that changes the window is
    kept (the last one if none does). Only the window's pixels are read and written (gathered by
    their flat indices): past the first tenth of the budget the windows are a pixel or two wide."""
    n, h, w, c = x0.shape
    sh, sw = _window(p, h, w)
    pixels = _window_pixels(n, h, w, sh, sw, rng)  # (n, k)
    rows = np.arange(n)[:, None]
    ends = linf_ends(x0, eps, clip_values) if ends is None else ends
    best = x_best.reshape(n, h * w, c)
    inside = best[rows, pixels]  # (n, k, c)
    corners = [end.reshape(n, h * w, c)[rows, pixels] for end in ends]
    # (n, c): whether the window, channel by channel, already holds that corner
    unchanged = [np.abs(corner - inside).sum(axis=1) < 1e-7 * sh * sw for corner in corners]
    draws = rng.integers(0, 2, size=(_REDRAWS, n, c)) > 0  # the draws the loop may need (as `_signs`)
    same = np.all(np.where(draws, unchanged[0], unchanged[1]), axis=2)  # (_REDRAWS, n)
    first = np.where(same.all(axis=0), _REDRAWS - 1, same.argmin(axis=0))  # first draw that changes
    plus = draws[first, np.arange(n)][:, None, :]  # (n, 1, c)
    cand = best.copy()
    cand[rows, pixels] = np.where(plus, corners[0], corners[1])
    return cand.reshape(x_best.shape)


def l2_proposal(x_best, x0, eps, p, rng, clip_values):
    """Algorithm 3's update: window 2 emptied into window 1 (plus a bump), rescaled to norm eps."""
    n, h, w, c = x0.shape
    sh, sw = _window(p, h, w, minimum=3, odd=True)
    patterns = np.stack([eta(sh, sw), eta(sh, sw).T]) if sh == sw else eta(sh, sw)[None]
    mask1, bump = _place(patterns, n, h, w, sh, sw, rng)
    mask2, _ = _place(patterns, n, h, w, sh, sw, rng)
    delta = (x_best - x0).astype(np.float64)
    norm_w1 = np.sqrt(np.sum(np.square(delta * mask1), axis=(1, 2), keepdims=True))  # (n, 1, 1, c)
    norm_both = np.sqrt(np.sum(np.square(delta * (mask1 | mask2)), axis=(1, 2), keepdims=True))
    room = np.maximum(eps**2 - np.square(geometry.per_sample_norm(delta)), 0.0) / c
    new = bump * _signs(rng, (n, 1, 1, c)) + delta * mask1 / (1e-10 + norm_w1)
    new_norm = np.sqrt(np.sum(np.square(new), axis=(1, 2), keepdims=True))
    new = new / np.maximum(new_norm, geometry.TINY) * np.sqrt(room + np.square(norm_both))
    delta = np.where(mask1, new, np.where(mask2, 0.0, delta))
    delta = eps * delta / np.maximum(geometry.per_sample_norm(delta), geometry.TINY)
    return geometry.project_and_clip(x0 + delta.astype(x0.dtype), x0, eps, 2.0, clip_values)


def l1_init(x0, eps, rng):
    """AutoAttack's L1 start: `l2_init`'s grid with the L1 patterns (projected by the caller)."""
    return l2_init(x0, eps, rng, norm=1)


def l1_proposal(x_best, x0, eps, p, rng, clip_values):
    """AutoAttack's L1 update: window 1 gets an L1 bump plus its old content (unit L1 norm per channel),
    scaled to the budget left plus the mass of both windows; window 2 is emptied; then the exact
    projection onto the L1-ball and the box."""
    n, h, w, c = x0.shape
    sh, sw = _window(p, h, w, minimum=3, odd=True)
    patterns = np.stack([eta(sh, sw, 1), eta(sh, sw, 1).T]) if sh == sw else eta(sh, sw, 1)[None]
    mask1, bump = _place(patterns, n, h, w, sh, sw, rng)
    mask2, _ = _place(patterns, n, h, w, sh, sw, rng)
    delta = (x_best - x0).astype(np.float64)
    norm_w1 = np.sum(np.abs(delta * mask1), axis=(1, 2), keepdims=True)  # (n, 1, 1, c)
    norm_both = np.sum(np.abs(delta * (mask1 | mask2)), axis=(1, 2), keepdims=True)
    room = np.maximum(eps - np.sum(np.abs(delta), axis=(1, 2, 3), keepdims=True), 0.0) / c
    new = bump * _signs(rng, (n, 1, 1, c)) + delta * mask1 / (1e-12 + norm_w1)
    new = new / (1e-12 + np.sum(np.abs(new), axis=(1, 2), keepdims=True)) * (room + norm_both) * c
    delta = np.where(mask1, new, np.where(mask2, 0.0, delta))
    return geometry.project_and_clip(x0 + delta.astype(x0.dtype), x0, eps, 1.0, clip_values)
