"""The Square Attack's proposals in `keras.ops`, drawn inside the compiled step (`_square_device.py`).

The same rules as the numpy reference `_square_proposals.py` (Linf Algorithm 1 with up to 8 sign redraws;
L2 Algorithm 3; L1 as AutoAttack's square.py), on images `(n, h, w, c)` of backend tensors. The
window side changes with the schedule of `p`, so a window is a mask over the whole image (static
shapes: one trace for every side); its side `(sh, sw)` and, for L2 and L1, its pattern `eta`
(computed on the host by `_square_proposals.eta`, one per side of the schedule, placed at the canvas'
corner) are looked up by the schedule's stage. A proposal reads its random numbers from `u`, a uniform
sample `(n, draws(norm, c))` that the compiled step draws with the seed the state carries
(`backend.compile_search`): the stream differs from numpy's, the distributions are the same.

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (Algorithms 1, 3).
"""

from keras import ops

from gradkit import backend
from gradkit.attacks import _geometry as geometry

REDRAWS = 8  # Linf: sign redraws when a proposal leaves the window unchanged (as `_square_proposals`)
PATCH_FRACTION = 4  # Linf: windows up to a quarter of the image's side are summed over a gathered patch


def draws(norm, channels):
    """Uniform numbers per row of a proposal: Linf a window corner and `REDRAWS` signs per channel;
    L2 and L1 two corners, an orientation and a sign per channel."""
    return 2 + REDRAWS * channels if norm == float("inf") else 5 + channels


def _corners(u_top, u_left, sh, sw, h, w):
    """Uniform window corners `(top (n,), left (n,))` int32 of `sh x sw` windows in `h x w`."""
    top = ops.cast(ops.floor(u_top * ops.cast(h - sh + 1, "float32")), "int32")
    left = ops.cast(ops.floor(u_left * ops.cast(w - sw + 1, "float32")), "int32")
    return ops.minimum(top, h - sh), ops.minimum(left, w - sw)


def _edges(top, left, sh, sw, h, w):
    """`(in_rows (n, h) bool, in_cols (n, w) bool, rows (n, h), cols (n, w))` of the windows at the
    corners `(top, left)` (`_corners`)."""
    rows = ops.expand_dims(ops.arange(h, dtype="int32"), 0) - ops.expand_dims(top, 1)
    cols = ops.expand_dims(ops.arange(w, dtype="int32"), 0) - ops.expand_dims(left, 1)
    return ops.logical_and(rows >= 0, rows < sh), ops.logical_and(cols >= 0, cols < sw), rows, cols


def window(u_top, u_left, sh, sw, h, w):
    """Per-sample windows of side `(sh, sw)` (int32 scalar tensors) at uniform corners from the uniform
    draws `u_top`, `u_left` `(n,)`: `(mask (n, h, w) bool, rows (n, h), cols (n, w))`, each pixel's
    offsets from its sample's corner."""
    in_rows, in_cols, rows, cols = _edges(*_corners(u_top, u_left, sh, sw, h, w), sh, sw, h, w)
    return ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)), rows, cols


def _channels(mask):
    """A bool mask `(n, h, w)` as float32 `(n, h, w, 1)`."""
    return ops.expand_dims(ops.cast(mask, "float32"), -1)


def _first_change(draws, unchanged):
    """Of the `REDRAWS` sign draws `(R, n, c)` (True: the `+` corner), the first whose window changes
    (the last one if none does), given whether each corner leaves the window as it is `(n, c)`:
    `(n, c)` bool."""
    plus, minus = ops.expand_dims(unchanged[0], 0), ops.expand_dims(unchanged[1], 0)
    same = ops.all(ops.where(draws, plus, minus), axis=2)  # (R, n)
    first = ops.cast(ops.argmin(ops.cast(same, "int32"), axis=0), "int32")
    first = ops.where(ops.all(same, axis=0), REDRAWS - 1, first)
    pick = ops.expand_dims(ops.arange(REDRAWS, dtype="int32"), 1) == ops.expand_dims(first, 0)
    return ops.any(ops.logical_and(draws, ops.expand_dims(pick, 2)), axis=0)


def _full_sums(best, ends, in_rows, in_cols):
    """`window_sums` over the whole image (the window as a mask)."""
    m = _channels(ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)))
    return ops.stack([ops.sum(ops.abs(end - best) * m, axis=(1, 2)) for end in ends])


def _patch_sums(best, ends, top, left, sides, size, keep):
    """`window_sums` over a gathered `size` patch that holds each sample's window (`sides <= size`)."""
    n, h, w, c = best.shape
    starts = ops.minimum(top, h - size[0]), ops.minimum(left, w - size[1])  # the patch inside the image
    rows, cols = (ops.expand_dims(s, 1) + ops.arange(k, dtype="int32") for s, k in zip(starts, size))
    in_rows = ops.logical_and(
        ops.logical_and(rows >= ops.expand_dims(top, 1), keep), rows < ops.expand_dims(top + sides[0], 1)
    )
    in_cols = ops.logical_and(cols >= ops.expand_dims(left, 1), cols < ops.expand_dims(left + sides[1], 1))
    first = ops.reshape(ops.arange(n, dtype="int32") * h, (n, 1, 1))
    index = ops.reshape((first + ops.expand_dims(rows, 2)) * w + ops.expand_dims(cols, 1), (-1,))

    def patch(a):
        return ops.reshape(ops.take(ops.reshape(a, (-1, c)), index, axis=0), (n, size[0], size[1], c))

    return _full_sums(patch(best), [patch(end) for end in ends], in_rows, in_cols)


def window_sums(best, ends, top, left, sides, empty=None):
    """Per (sample, channel) sums of `|end - best|` over each sample's window, for both `ends`: `(2, n, c)`
    float32. The window of side `sides` `(sh, sw)` (int32 scalar tensors) at `(top, left)` `(n,)`; `empty`
    (a bool scalar tensor, or None): where true, every window is empty (sums of zero).

    Windows up to `1 / PATCH_FRACTION` of the image's side are summed over a patch of that size gathered
    around them (a branch, one trace for every side), larger ones over the whole image as a mask: past
    the first stages of `p`'s schedule a window is a few pixels of a 32 x 32 image."""
    n, h, w, c = best.shape
    keep = ops.ones((), "bool") if empty is None else ops.logical_not(empty)
    size = (-(-h // PATCH_FRACTION), -(-w // PATCH_FRACTION))

    def full():
        in_rows, in_cols, _, _ = _edges(top, left, sides[0], sides[1], h, w)
        return _full_sums(best, ends, ops.logical_and(in_rows, keep), in_cols)

    if size[0] >= h and size[1] >= w:
        return full()
    fits = ops.logical_and(sides[0] <= size[0], sides[1] <= size[1])
    return ops.cond(fits, lambda: _patch_sums(best, ends, top, left, sides, size, keep), full)


def linf_proposal(best, ends, sides, u, empty=None):
    """A random window of each sample set to `x0 +- eps` (one sign per channel), from the uniform draws
    `u` `(n, draws(inf, c))`.

    `ends` are the two clipped corners `[x0 + eps, x0 - eps]` (`_square_proposals.linf_ends`), `sides`
    the window's `(sh, sw)`; signs are redrawn (up to `REDRAWS` draws) where they would not change the
    window, as in the authors' loop (whether a sign leaves the window as it is: `window_sums`). `empty`
    (a bool scalar tensor, or None): where true, the window is empty and the proposal is `best` itself."""
    n, h, w, c = best.shape
    top, left = _corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
    in_rows, in_cols, _, _ = _edges(top, left, sides[0], sides[1], h, w)
    if empty is not None:
        in_rows = ops.logical_and(in_rows, ops.logical_not(empty))
    tolerance = 1e-7 * ops.cast(sides[0] * sides[1], "float32")
    draws = ops.transpose(ops.reshape(u[:, 2:], (n, REDRAWS, c)), (1, 0, 2)) < 0.5

    def signs(unchanged):  # (n, c): the channels that take the + corner
        return _first_change(draws, unchanged)

    if backend.linf_window is not None:  # PyTorch: in one buffer
        return backend.linf_window(best, ends, in_rows, in_cols, tolerance, signs)
    m = _channels(ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)))
    unchanged = window_sums(best, ends, top, left, sides, empty) < tolerance  # (2, n, c)
    plus = ops.expand_dims(ops.expand_dims(signs(unchanged), 1), 1)
    return ops.where(m > 0, ops.where(plus, ends[0], ends[1]), best)


def _pattern(patterns, stage, orient, rows, cols):
    """The stage's pattern (orientation `orient` `(n,)` int32) at each sample's window: `(n, h, w)`."""
    _, _, h, w = patterns.shape
    rows, cols = ops.clip(rows, 0, h - 1), ops.clip(cols, 0, w - 1)
    base = ops.reshape((stage * 2 + orient) * h, (-1, 1, 1))
    index = (base + ops.expand_dims(rows, 2)) * w + ops.expand_dims(cols, 1)
    flat = ops.take(ops.reshape(patterns, (-1,)), ops.reshape(index, (-1,)))
    return ops.reshape(flat, (-1, h, w))


def _sums(a, norm=2):
    """Per (sample, channel) L2 (or L1) norms over the image `(n, 1, 1, c)`."""
    if norm == 1:
        return ops.sum(ops.abs(a), axis=(1, 2), keepdims=True)
    return ops.sqrt(ops.sum(ops.square(a), axis=(1, 2), keepdims=True))


def _two_windows(best, patterns, stage, sides, u):
    """Algorithm 3's two random windows and window 1's signed bump (the stage's pattern, a random sign per
    channel) from the draws `u` `(n, 5 + c)`: `(m1, m2, bump)`, the masks float32 `(n, h, w, 1)`, the
    bump `(n, h, w, c)`."""
    n, h, w, c = best.shape
    mask1, rows, cols = window(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
    mask2, _, _ = window(u[:, 2], u[:, 3], sides[0], sides[1], h, w)
    bump = _pattern(patterns, stage, ops.cast(u[:, 4] < 0.5, "int32"), rows, cols)
    bump = ops.expand_dims(ops.where(mask1, bump, 0.0), -1)
    signs = ops.reshape(ops.where(u[:, 5:] < 0.5, -1.0, 1.0), (n, 1, 1, c))
    return _channels(mask1), _channels(mask2), bump * signs


def l2_proposal(best, x0, eps, patterns, stage, sides, u, bounds):
    """Algorithm 3's update: window 2 emptied into window 1 (plus a bump of the stage's pattern with a
    random sign per channel), rescaled to norm eps, projected and clipped; `u` the draws."""
    c = best.shape[-1]
    m1, m2, bump = _two_windows(best, patterns, stage, sides, u)
    eps = ops.cast(eps, "float32")
    delta = best - x0
    norm_w1, norm_both = _sums(delta * m1), _sums(delta * ops.maximum(m1, m2))
    room = ops.maximum(eps**2 - ops.square(geometry.per_sample_norm_tensor(delta)), 0.0) / c
    new = bump + delta * m1 / (1e-10 + norm_w1)
    new = new / ops.maximum(_sums(new), geometry.TINY) * ops.sqrt(room + ops.square(norm_both))
    delta = ops.where(m1 > 0, new, ops.where(m2 > 0, 0.0, delta))
    delta = eps * delta / ops.maximum(geometry.per_sample_norm_tensor(delta), geometry.TINY)
    return geometry.project_and_clip_tensor(x0 + delta, x0, eps, 2, bounds)


def l1_proposal(best, x0, eps, patterns, stage, sides, u, bounds):
    """AutoAttack's L1 update (`_square_proposals.l1_proposal`): window 1 gets the L1 bump plus its old
    content, scaled to the budget left plus both windows' mass; window 2 is emptied; then the exact
    projection onto the L1-ball and the box; `u` the draws."""
    c = best.shape[-1]
    m1, m2, bump = _two_windows(best, patterns, stage, sides, u)
    eps = ops.cast(eps, "float32")
    delta = best - x0
    norm_w1, norm_both = _sums(delta * m1, 1), _sums(delta * ops.maximum(m1, m2), 1)
    room = ops.maximum(eps - ops.sum(ops.abs(delta), axis=(1, 2, 3), keepdims=True), 0.0) / c
    new = bump + delta * m1 / (1e-12 + norm_w1)
    new = new / (1e-12 + _sums(new, 1)) * (room + norm_both) * c
    delta = ops.where(m1 > 0, new, ops.where(m2 > 0, 0.0, delta))
    return geometry.project_and_clip_tensor(x0 + delta, x0, eps, 1, bounds)
