"""The numerical core of the Square Attack (Andriushchenko et al. 2020), in numpy over one `forward` callable.

`square_core` is a random search: each sample keeps its best point and, once per iteration, tries one
change of a random square window of it; the change is kept when the objective of `forward` (the margin
loss, to maximize) rises or the decision succeeds. A sample that succeeded is no longer queried.

- Linf (Algorithm 1): start from vertical stripes `x0 + eps * s`, `s in {-1, 1}` per (column, channel);
  a proposal sets a random window to `x0 +- eps` (one sign per channel). As in the authors' code, the
  signs are redrawn (up to 8 times) when the proposal would not change the window.
- L2 (Algorithm 3): start from a grid of tiles carrying the "pseudo-Gaussian" bumps `eta` with random
  signs per (tile, channel), scaled to the eps-sphere; a proposal moves the perturbation mass of a second
  window into the first, adds a bump there, and rescales the whole perturbation to norm eps.
- Window side `s = round(sqrt(p * h * w))` (L2: at least 3 and odd), `p` halved at iterations 10, 50,
  200, 500, 1000, 2000, 4000, 6000 and 8000 of a 10000-query budget, rescaled to `n_queries`.

Windows are drawn per sample (the authors' L2 code draws one window for the whole batch). Inputs are
images `(n, h, w, c)` channels-last; `(n, h, w)` is read as one channel; flat `(n, d)` as a `(h, w, 1)`
image with `h` the largest divisor of `d` not above `sqrt(d)` (so `64 -> 8 x 8`, a prime `d -> 1 x d`);
more dimensions fold into channels. Windows larger than a side are cut to it.

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (reference code:
    max-andr/square-attack `attack.py`, fra31/auto-attack `autoattack/square.py`).
"""

import numpy as np

from gradkit import _checks
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._apgd import succeeded

_HALVINGS = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)  # of a 10000-query budget
_REDRAWS = 8  # Linf: sign redraws when a proposal leaves the window unchanged


def p_schedule(p_init, iteration, n_queries):
    """The fraction `p` of pixels changed at `iteration` (0-based): `p_init` halved after each mark."""
    it = int(iteration / n_queries * 10000)
    return p_init / 2 ** sum(it > mark for mark in _HALVINGS)


def as_image(x):
    """A view of `x` `(n, ...)` as images `(n, h, w, c)` (see the module docstring for the rules)."""
    if x.ndim == 4:
        return x
    if x.ndim == 3:
        return x[..., None]
    if x.ndim == 2:
        d = x.shape[1]
        h = max(k for k in range(1, int(np.sqrt(d)) + 1) if d % k == 0)
        return x.reshape(len(x), h, d // h, 1)
    return x.reshape(x.shape[:3] + (-1,))


def _bumps(a, b):
    """Concentric rectangles `(a, b)` weighted `sum_{k >= d} 1/(k+1)^2`, d the Chebyshev distance to the
    centre `(a // 2, b // 2)`; unit L2 norm (zeros when a side is 0)."""
    if a == 0 or b == 0:
        return np.zeros((a, b))
    dist = np.maximum(np.abs(np.arange(a) - a // 2)[:, None], np.abs(np.arange(b) - b // 2)[None, :])
    weights = 1.0 / (np.arange(max(a, b) // 2 + 1) + 1.0) ** 2
    out = np.cumsum(weights[::-1])[::-1][dist]
    return out / np.linalg.norm(out)


def eta(a, b):
    """The L2 update pattern `(a, b)`: a bump and its negative side by side along the longer side."""
    if a < b:
        return eta(b, a).T
    out = np.concatenate([_bumps(a // 2, b), -_bumps(a - a // 2, b)], axis=0)
    return out / np.linalg.norm(out)


def _window(p, h, w, minimum=1, odd=False):
    """The window sides `(sh, sw)` for the fraction `p` of an `h x w` image."""
    s = max(int(round(np.sqrt(p * h * w))), minimum)
    s += int(odd and s % 2 == 0)
    return min(s, h), min(s, w)


def _windows(n, h, w, sh, sw, rng):
    """Random per-sample windows: `(mask (n, h, w) bool, rows (n, h), cols (n, w))`, the offsets of
    each pixel from its sample's window corner."""
    top = rng.integers(0, h - sh + 1, size=n)[:, None]
    left = rng.integers(0, w - sw + 1, size=n)[:, None]
    rows, cols = np.arange(h)[None, :] - top, np.arange(w)[None, :] - left
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
    return rng.choice(np.array([-1.0, 1.0]), size=shape)


def _linf_init(x0, eps, rng):
    """Vertical stripes: `x0 + eps * s`, one sign per (sample, column, channel)."""
    n, _, w, c = x0.shape
    return x0 + (eps * _signs(rng, (n, 1, w, c))).astype(x0.dtype)


def _l2_init(x0, eps, rng):
    """Tiles of side `min(h, w) // 5` carrying `eta` with random signs per (sample, tile, channel)."""
    n, h, w, c = x0.shape
    s = max(min(h, w) // 5, 1)
    nh, nw = h // s, w // s
    tiles = np.stack([eta(s, s), eta(s, s).T])[rng.integers(0, 2, size=(nh, nw))]  # (nh, nw, s, s)
    grid = tiles.transpose(0, 2, 1, 3).reshape(nh * s, nw * s)
    signs = np.repeat(np.repeat(_signs(rng, (n, nh, nw, c)), s, axis=1), s, axis=2)
    delta = np.zeros(x0.shape)
    oh, ow = (h - nh * s) // 2, (w - nw * s) // 2
    delta[:, oh : oh + nh * s, ow : ow + nw * s] = grid[None, :, :, None] * signs
    return x0 + (eps * delta / np.maximum(geometry.per_sample_norm(delta), geometry.TINY)).astype(x0.dtype)


def linf_ends(x0, eps, clip_values):
    """The two corners `[x0 + eps, x0 - eps]`, each projected and clipped, that Linf windows take."""
    e = x0.dtype.type(eps)
    return [geometry.project_and_clip(x0 + e * s, x0, eps, np.inf, clip_values) for s in (1, -1)]


def _linf_proposal(x_best, x0, eps, p, rng, clip_values, ends=None):
    """Sets a random window of each sample to `x0 +- eps` (one sign per channel), then clips; `ends`
    is `linf_ends(x0, eps, clip_values)` when the caller keeps it.

    A sample whose signs would leave its window as it is gets new signs, up to `_REDRAWS` draws in
    all (the authors' loop): the draws are made at once and the first that changes the window is
    kept (the last one if none does), read from two boolean `(n, c)` tables, so the images are
    built once."""
    n, h, w, c = x0.shape
    sh, sw = _window(p, h, w)
    mask = _windows(n, h, w, sh, sw, rng)[0][..., None]
    weights = mask.reshape(n, 1, h * w).astype(x0.dtype)
    ends = linf_ends(x0, eps, clip_values) if ends is None else ends
    # (n, c): whether the window, channel by channel, already holds that end (a matmul sums |diff|
    # over the window ten times faster than a boolean reduction over the middle axes)
    unchanged = [
        np.matmul(weights, np.abs(end - x_best).reshape(n, h * w, c))[:, 0] < 1e-7 * sh * sw for end in ends
    ]
    draws = _signs(rng, (_REDRAWS, n, c)) > 0  # the draws the loop may need, made at once
    same = np.all(np.where(draws, unchanged[0], unchanged[1]), axis=2)  # (_REDRAWS, n)
    first = np.where(same.all(axis=0), _REDRAWS - 1, same.argmin(axis=0))  # first draw that changes
    plus = draws[first, np.arange(n)][:, None, None, :]
    return np.where(mask, np.where(plus, ends[0], ends[1]), x_best)


def _l2_proposal(x_best, x0, eps, p, rng, clip_values):
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


class _Active:
    """The rows still attacked, kept as compact copies (`idx`: their rows in the full arrays), so an
    iteration indexes nothing; a success drops its rows (rare: most points stay robust)."""

    def __init__(self, idx, best, values, img0, labels, targets, norm, eps, clip_values):
        self.idx, self.best, self.values = idx, best[idx], values[idx]
        self.img0, self.labels = img0[idx], labels[idx]
        self.targets = None if targets is None else targets[idx]
        self._corners = (eps, clip_values) if norm == np.inf else None
        self.ends = None if self._corners is None else linf_ends(self.img0, *self._corners)

    def keep(self, stay):
        """Drops the rows where `stay` is False."""
        self.idx, self.best, self.values = self.idx[stay], self.best[stay], self.values[stay]
        self.img0, self.labels = self.img0[stay], self.labels[stay]
        self.targets = None if self.targets is None else self.targets[stay]
        self.ends = None if self.ends is None else [end[stay] for end in self.ends]


def _query(forward, x, shape, labels, targets):
    """`forward` on the images `x`, reshaped to the caller's `shape`: `(values, success)`."""
    values, predictions = forward(x.reshape((len(x),) + shape[1:]), labels, targets)
    values = np.asarray(values, dtype=np.float64).reshape(len(x))
    return values, succeeded(predictions, labels, targets).reshape(len(x))


def square_core(forward, x0, labels, *, eps, norm, n_queries, p_init, clip_values, rng, targets=None):
    """The Square Attack (Andriushchenko et al. 2020), Linf (Algorithm 1) or L2 (Algorithm 3).

    Args:
        forward: callable `(x, labels, targets) -> (values, predictions)` on a subset of rows `(m, ...)`;
            `values` float64 `(m,)`, the margin loss to maximize; `predictions` int `(m,)`, the decision.
        x0: clean inputs, float32 `(n, h, w, c)` channels-last (other shapes: see the module docstring).
        labels: int `(n,)`. targets: None or int `(n,)` (then success means the decision equals it).
        eps: radius, >= 0. norm: `np.inf` or `2`. n_queries: the `forward` budget per sample, >= 1,
            the start included. p_init: initial fraction of pixels changed, in (0, 1].
        clip_values: None or `(min, max)`. rng: a `np.random.Generator` (or a seed).

    Returns:
        `(x_best, success, n_queries_used)`: float32 like x0 (each sample's first successful point, else
        its best one); bool `(n,)`; int64 `(n,)`, the rows of `forward` calls spent on each sample.

    Raises:
        ValueError / TypeError: for a bad `eps`, `norm`, `n_queries`, `p_init` or `clip_values`.
    """
    eps, norm = _checks.check_eps(eps), _checks.check_norm(norm)
    n_queries = _checks.check_int(n_queries, "n_queries", minimum=1)
    p_init = _checks.check_real(p_init, "p_init", minimum=0, strict=True, maximum=1)
    clip_values = _checks.check_clip_values(clip_values)
    rng, x0 = np.random.default_rng(rng), np.asarray(x0, dtype=np.float32)
    labels, targets = np.asarray(labels), None if targets is None else np.asarray(targets)
    img0 = as_image(x0)
    init, propose = (_linf_init, _linf_proposal) if norm == np.inf else (_l2_init, _l2_proposal)
    best = geometry.project_and_clip(init(img0, eps, rng), img0, eps, norm, clip_values)
    best_values, success = _query(forward, best, x0.shape, labels, targets)
    used = np.ones(len(x0), dtype=np.int64)
    run = _Active(np.flatnonzero(~success), best, best_values, img0, labels, targets, norm, eps, clip_values)
    for i in range(n_queries - 1):
        if len(run.idx) == 0:
            break
        extra = {} if run.ends is None else {"ends": run.ends}
        cand = propose(run.best, run.img0, eps, p_schedule(p_init, i, n_queries), rng, clip_values, **extra)
        values, hit = _query(forward, cand, x0.shape, run.labels, run.targets)
        used[run.idx] += 1
        keep = (values > run.values) | hit
        run.best[keep], run.values[keep] = cand[keep], values[keep]
        if hit.any():
            best[run.idx], success[run.idx[hit]] = run.best, True
            run.keep(~hit)
    best[run.idx] = run.best
    return best.reshape(x0.shape), success, used
