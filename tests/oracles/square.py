"""The numpy reference of the Square Attack (Andriushchenko et al. 2020) over one `forward` callable: the
oracle the device Square of `gradkit.attacks.square` is checked against (the same rules and
distributions; numpy's random stream).

`square_core` is a random search: each sample keeps its best point and, once per iteration, tries one
change of a random square window of it (the proposals below: Linf Algorithm 1, L2 Algorithm 3, L1 as
AutoAttack's square.py); the change is kept when the objective of `forward` (the margin loss, to
maximize) rises or the decision succeeds. A sample that succeeded is no longer queried. The schedule of
`p`, the starts and the patterns are the runtime module's.

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (reference code:
    max-andr/square-attack `attack.py`, fra31/auto-attack `autoattack/square.py`).
"""

import numpy as np

from gradkit import _checks
from gradkit.attacks import geometry
from gradkit.attacks.square import (
    as_image,
    eta,
    l1_init,
    l2_init,
    linf_ends,
    linf_init,
    p_schedule,
    random_signs,
    window_sides,
)
from oracles.apgd import succeeded

_REDRAWS = 8  # Linf: sign redraws when a proposal leaves the window unchanged


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
    sh, sw = window_sides(p, h, w)
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
    sh, sw = window_sides(p, h, w, minimum=3, odd=True)
    patterns = np.stack([eta(sh, sw), eta(sh, sw).T]) if sh == sw else eta(sh, sw)[None]
    mask1, bump = _place(patterns, n, h, w, sh, sw, rng)
    mask2, _ = _place(patterns, n, h, w, sh, sw, rng)
    delta = (x_best - x0).astype(np.float64)
    norm_w1 = np.sqrt(np.sum(np.square(delta * mask1), axis=(1, 2), keepdims=True))  # (n, 1, 1, c)
    norm_both = np.sqrt(np.sum(np.square(delta * (mask1 | mask2)), axis=(1, 2), keepdims=True))
    room = np.maximum(eps**2 - np.square(geometry.per_sample_norm(delta)), 0.0) / c
    new = bump * random_signs(rng, (n, 1, 1, c)) + delta * mask1 / (1e-10 + norm_w1)
    new_norm = np.sqrt(np.sum(np.square(new), axis=(1, 2), keepdims=True))
    new = new / np.maximum(new_norm, geometry.TINY) * np.sqrt(room + np.square(norm_both))
    delta = np.where(mask1, new, np.where(mask2, 0.0, delta))
    delta = eps * delta / np.maximum(geometry.per_sample_norm(delta), geometry.TINY)
    return geometry.project_and_clip(x0 + delta.astype(x0.dtype), x0, eps, 2.0, clip_values)


def l1_proposal(x_best, x0, eps, p, rng, clip_values):
    """AutoAttack's L1 update: window 1 gets an L1 bump plus its old content (unit L1 norm per channel),
    scaled to the budget left plus the mass of both windows; window 2 is emptied; then the exact
    projection onto the L1-ball and the box."""
    n, h, w, c = x0.shape
    sh, sw = window_sides(p, h, w, minimum=3, odd=True)
    patterns = np.stack([eta(sh, sw, 1), eta(sh, sw, 1).T]) if sh == sw else eta(sh, sw, 1)[None]
    mask1, bump = _place(patterns, n, h, w, sh, sw, rng)
    mask2, _ = _place(patterns, n, h, w, sh, sw, rng)
    delta = (x_best - x0).astype(np.float64)
    norm_w1 = np.sum(np.abs(delta * mask1), axis=(1, 2), keepdims=True)  # (n, 1, 1, c)
    norm_both = np.sum(np.abs(delta * (mask1 | mask2)), axis=(1, 2), keepdims=True)
    room = np.maximum(eps - np.sum(np.abs(delta), axis=(1, 2, 3), keepdims=True), 0.0) / c
    new = bump * random_signs(rng, (n, 1, 1, c)) + delta * mask1 / (1e-12 + norm_w1)
    new = new / (1e-12 + np.sum(np.abs(new), axis=(1, 2), keepdims=True)) * (room + norm_both) * c
    delta = np.where(mask1, new, np.where(mask2, 0.0, delta))
    return geometry.project_and_clip(x0 + delta.astype(x0.dtype), x0, eps, 1.0, clip_values)


_PROPOSALS = {np.inf: (linf_init, linf_proposal), 2.0: (l2_init, l2_proposal), 1.0: (l1_init, l1_proposal)}


class _Active:
    """The rows still attacked, kept as compact copies (`idx`: their rows in the full arrays), so an
    iteration indexes nothing; a success drops its rows (rare: most points stay robust). `query` is
    the forward pass bound to the rows' labels, rebound when rows drop."""

    def __init__(self, idx, best, values, img0, labels, targets, norm, eps, clip_values, bind):
        self.idx, self.best, self.values = idx, best[idx], values[idx]
        self.img0, self.labels = img0[idx], labels[idx]
        self.targets = None if targets is None else targets[idx]
        self._corners = (eps, clip_values) if norm == np.inf else None
        self.ends = None if self._corners is None else linf_ends(self.img0, *self._corners)
        self._bind = bind
        self.query = bind(self.labels, self.targets) if len(idx) else None

    def keep(self, stay):
        """Drops the rows where `stay` is False."""
        self.idx, self.best, self.values = self.idx[stay], self.best[stay], self.values[stay]
        self.img0, self.labels = self.img0[stay], self.labels[stay]
        self.targets = None if self.targets is None else self.targets[stay]
        self.ends = None if self.ends is None else [end[stay] for end in self.ends]
        self.query = self._bind(self.labels, self.targets) if len(self.idx) else None


def _query(forward, x, shape, labels, targets):
    """`forward(x)` (bound to `labels`, `targets`) on the images `x`, reshaped to the caller's `shape`:
    `(values, success)`."""
    values, predictions = forward(x.reshape((len(x),) + shape[1:]))
    values = np.asarray(values, dtype=np.float64).reshape(len(x))
    return values, succeeded(predictions, labels, targets).reshape(len(x))


def square_core(
    forward, x0, labels, *, eps, norm, n_queries, p_init, clip_values, rng, targets=None, bind=None
):
    """The Square Attack (Andriushchenko et al. 2020), Linf (Algorithm 1), L2 (Algorithm 3) or L1
    (AutoAttack's Square-L1).

    Args:
        forward: callable `(x, labels, targets) -> (values, predictions)` on a subset of rows `(m, ...)`;
            `values` float64 `(m,)`, the margin loss to maximize; `predictions` int `(m,)`, the decision.
        x0: clean inputs, float32 `(n, h, w, c)` channels-last (other shapes: see the module docstring).
        labels: int `(n,)`. targets: None or int `(n,)` (then success means the decision equals it).
        eps: radius, >= 0. norm: `np.inf`, `2` or `1`. n_queries: the `forward` budget per sample, >= 1,
            the start included. p_init: initial fraction of pixels changed, in (0, 1].
        clip_values: None or `(min, max)`. rng: a `np.random.Generator` (or a seed).
        bind: None, or `bind(labels, targets) -> forward_on_x` giving `forward` bound to fixed rows
            (cheaper per call: see `Session.bind`); then `forward` is not called.

    Returns:
        `(x_best, success, n_queries_used)`: float32 like x0 (each sample's first successful point, else
        its best one); bool `(n,)`; int64 `(n,)`, the rows of `forward` calls spent on each sample.

    Raises:
        ValueError / TypeError: for a bad `eps`, `norm`, `n_queries`, `p_init` or `clip_values`.
    """
    eps, norm = _checks.check_eps(eps), _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    n_queries = _checks.check_int(n_queries, "n_queries", minimum=1)
    p_init = _checks.check_real(p_init, "p_init", minimum=0, strict=True, maximum=1)
    clip_values = _checks.check_clip_values(clip_values)
    rng, x0 = np.random.default_rng(rng), np.asarray(x0, dtype=np.float32)
    bind = bind or (lambda labels, targets: lambda x: forward(x, labels, targets))
    labels, targets = np.asarray(labels), None if targets is None else np.asarray(targets)
    img0 = as_image(x0)
    init, propose = _PROPOSALS[norm]
    best = geometry.project_and_clip(init(img0, eps, rng), img0, eps, norm, clip_values)
    best_values, success = _query(bind(labels, targets), best, x0.shape, labels, targets)
    used = np.ones(len(x0), dtype=np.int64)
    idx = np.flatnonzero(~success)
    run = _Active(idx, best, best_values, img0, labels, targets, norm, eps, clip_values, bind)
    extra, done = {} if run.ends is None else {"ends": run.ends}, 0  # done: iterations run
    for i in range(n_queries - 1):
        if len(run.idx) == 0:
            break
        cand = propose(run.best, run.img0, eps, p_schedule(p_init, i, n_queries), rng, clip_values, **extra)
        values, hit = _query(run.query, cand, x0.shape, run.labels, run.targets)
        done = i + 1
        keep = (values > run.values) | hit
        np.copyto(run.best, cand, where=keep.reshape((-1,) + (1,) * (cand.ndim - 1)))
        np.copyto(run.values, values, where=keep)
        if hit.any():
            best[run.idx], success[run.idx[hit]] = run.best, True
            used[run.idx[hit]] += done  # queried at every iteration until now
            run.keep(~hit)
            extra = {} if run.ends is None else {"ends": run.ends}
    best[run.idx], used[run.idx] = run.best, used[run.idx] + done
    return best.reshape(x0.shape), success, used
