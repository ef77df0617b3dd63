"""The Square Attack (Andriushchenko et al. 2020): a score-based random search, Linf, L2 and L1.

Algorithm. Each sample keeps its best point `x*` and its margin loss `L(x*)` (max_{j != y} z_j - z_y;
targeted: z_t - max_{j != t} z_j). Once per query it proposes a change of a random square window of
side `s = round(sqrt(p h w))` (L2, L1: at least 3 and odd) and keeps it where the loss rises or the
decision succeeds; a sample that succeeded is no longer queried. `p` starts at `p_init` and is halved
at iterations 10, 50, 200, 500, 1000, 2000, 4000, 6000 and 8000 of a 10000-query budget, rescaled to
`n_queries`.

- Linf (Algorithm 1): start from vertical stripes `x0 + eps s`, `s in {-1, 1}` per (column, channel); a
  proposal sets the window to `x0 +- eps` (one sign per channel), the signs redrawn (up to 8 times)
  where they would leave the window unchanged, as in the authors' loop. A per-feature budget (an
  array eps) gives each feature its own `x0_i +- eps_i`, in the stripes and the windows alike.
- L2 (Algorithm 3): start from tiles carrying the "pseudo-Gaussian" bumps `eta` with random signs,
  scaled to the eps-sphere; a proposal moves the perturbation mass of a second window into the first,
  adds a bump there and rescales the whole perturbation to norm eps.
- L1 (AutoAttack's Square-L1): the L2 scheme with bumps weighted `1/(k+1)^4` of unit L1 norm, each point
  projected exactly onto the L1-ball and the box.

Windows are drawn per sample, over the image's height and width in the model's own layout
(`data_format`, read from its layers: a channels-first model, as ported from PyTorch, is searched
as `(n, h, w, c)` after moving its channel axis last, and its candidates moved back). Images are then
`(n, h, w, c)`; `(n, h, w)` is one channel; flat `(n, d)` is a `(h, w, 1)` image with `h` the largest
divisor of `d` not above `sqrt(d)`; more dimensions fold into channels. The start is drawn on the
host (numpy); the proposals inside the compiled step (`backend.compile_search`) from uniform draws of
the backend's random ops, seeded per batch: the stream differs from numpy's, the distributions are
the same. A window is a mask over the whole image (static shapes: one trace for every side), its side
and pattern looked up by the schedule's stage; the host reads one flag every `CHECK_EVERY` steps.

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (Algorithms 1, 3;
    reference code: max-andr/square-attack `attack.py`, fra31/auto-attack `autoattack/square.py`).
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (the L1 projection; Square-L1 in AutoAttack's code).
"""

import numpy as np
from keras import ops

from gradkit import _checks, backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import geometry
from gradkit.attacks._frame import LAYOUTS, Frame, broadcast_eps, check_eps

HALVINGS = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)  # of a 10000-query budget
STAGES = len(HALVINGS) + 1
CHECK_EVERY = 100  # steps between two reads of "any row still attacked?"
REDRAWS = 8  # Linf: sign redraws when a proposal leaves the window unchanged
PATCH_FRACTION = 4  # Linf: windows up to a quarter of the image's side are summed over a gathered patch


def square(
    model,
    x,
    y=None,
    *,
    eps,
    norm=np.inf,
    n_queries=5000,
    p_init=0.8,
    targeted=False,
    clip_values=None,
    batch_size=None,
    output=None,
    objective="loss_sum",
    seed=None,
    data_format=None,
    preprocessing=None,
    mask=None,
    attack_inputs=None,
):
    """The Square Attack (Andriushchenko et al. 2020): random search with square-shaped updates.

    Score-based: it needs only the model's outputs (no gradient), so it is the suite's check against
    gradient masking. The algorithm is in `gradkit.attacks.square`'s module docstring; each sample
    stops being queried once it fools the model's real decision rule (argmax; an ensemble's weighted
    hard vote).

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a boosting estimator.
        x: float32 `(n, *input_shape)` inside `clip_values`, images in the model's layout (see
            `data_format`).
        y: class ids `(n,)` or one-hot: the true labels, or the targets when `targeted` (then required).
            Defaults to the model's predictions.
        eps: radius, float >= 0 (input units); Linf also a per-feature budget, an array >= 0
            broadcastable to one input's shape (in the model's layout). norm: `np.inf` (default), `2` or
            `1` (L1: AutoAttack's Square-L1, L1 bumps `1/(k+1)^4`, the exact L1-ball and box projection).
        n_queries: forward passes per sample, the start included, int >= 1. Defaults to 5000.
        p_init: initial fraction of the input changed per query, in (0, 1]. Defaults to 0.8.
        targeted: False (default) or True (pull towards the classes `y`).
        clip_values, batch_size, output, objective, mask, attack_inputs: as in `gradkit.apgd`
            (objective "vote_margin" uses the margin of the smoothed weighted vote; windows and the
            start change only the features of `mask`).
        seed: None or int >= 0 seeding the random search (the start in numpy, the proposals with
            the backend's random ops inside the compiled step).
        data_format: None (default: the model's layout, from the `data_format` of its convolution and
            pooling layers, else `keras.config.image_data_format()`; a wrapped PyTorch module is
            channels-first), "channels_last" (`(n, h, w, c)`) or "channels_first" (`(n, c, h, w)`):
            which axes of an image are its height, width and channels, over which windows run.
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        float32 `(n, *input_shape)` adversarial examples in the eps-ball and in `clip_values`.

    Raises:
        ValueError: eps < 0 (an array: also with L2/L1 or not broadcastable), n_queries < 1, p_init
            outside (0, 1], a bad norm or labels, `targeted` without `y`, a bad `data_format`, or image
            inputs of a model whose layers mix both layouts without `data_format`; before any work.
        TypeError: several inputs of an ensemble, non-integer `n_queries`, a bad `model`.

    References:
        Andriushchenko, Croce, Flammarion & Hein (2020), https://arxiv.org/abs/1912.00049; Croce &
        Hein (2021), https://arxiv.org/abs/2103.01208 (the L1 projection and Square-L1).
    """
    n_queries = _checks.check_int(n_queries, "n_queries", minimum=1)
    p_init = _checks.check_real(p_init, "p_init", minimum=0, strict=True, maximum=1)
    seed = _checks.check_seed(seed)
    if _checks.check_flag(targeted, "targeted") and y is None:  # the predictions would be "fooled" at once
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    eps = _checks.check_eps(eps) if np.ndim(eps) == 0 else eps
    norm = _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    eps = check_eps(eps, norm)  # an array: a per-feature budget (Linf)
    frame = Frame(
        model,
        x,
        y,
        loss="margin",
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        batch_size=batch_size,
        output=output,
        objective=objective,
        targeted=targeted,
        single_input="Square",
        preprocessing=preprocessing,
    )
    layout, eps = _layout(frame, data_format), broadcast_eps(eps, frame.x0)
    if not np.any(eps):
        frame.success = frame.predict(frame.x0) != frame.labels
        return frame.finish(frame.x0.copy())
    x_adv, frame.success, _ = run(
        frame,
        frame.x0,
        frame.labels,
        frame.labels if frame.targeted else None,
        eps=eps,
        norm=norm,
        n_queries=n_queries,
        p_init=p_init,
        rng=np.random.default_rng(seed),
        layout=layout,
    )
    return frame.finish(geometry.inside(x_adv, frame.x0, eps, norm))


def _layout(frame, data_format):
    """The layout Square reads images in: `data_format` if given, else the frame's (the model's);
    ValueError where image inputs meet a model whose layers mix both layouts."""
    if data_format is not None:
        return _checks.check_choice(data_format, "data_format", LAYOUTS)
    if frame.data_format is None and frame.x0.ndim >= 3:
        raise ValueError(
            "`data_format` must be given for a model whose layers mix channels_first and channels_last: "
            "Square runs its windows over the image's height and width. Pass "
            "data_format='channels_first' (inputs (n, c, h, w)) or 'channels_last' ((n, h, w, c)). "
            "Received: data_format=None"
        )
    return frame.data_format or "channels_last"


def run(frame, x0, labels, targets, *, eps, norm, n_queries, p_init, rng, layout="channels_last"):
    """The random search on the rows `x0` `(m, ...)` with `labels` (and `targets`, or None): `(x_best,
    success, n_queries_used)`. The start and each batch's device seed come from `rng` (a
    `np.random.Generator`); the queried rows are added to `frame.n_forwards`. `layout`: the layout of
    `x0`'s images, "channels_last" or "channels_first"."""
    image = as_image(channels_last(x0, layout)).shape[1:]

    def per_feature(a):  # a per-feature array `(1, ...)` as a channels-last image; None and numbers as is
        return a if a is None or np.ndim(a) == 0 else as_image(channels_last(a, layout))

    box = tuple(per_feature(b) for b in frame.clip_values or ())
    mask, eps = per_feature(frame.mask), per_feature(eps)
    start, rows, tensors = _constants(box or None, x0, eps, norm, n_queries, p_init, rng, layout, mask)
    objective, clip = frame.objective, frame.clip_values is not None
    static = dict(norm=norm, targeted=targets is not None, clip=clip, mask=mask is not None)
    parts = _step(objective, image, x0.shape[1:], layout, **static)
    step = objective.search_function("square", *parts, image=image, layout=layout, **static)
    (trainables, non_trainables), parts = objective.fixed(labels, targets)
    out = {"x": [], "success": [], "used": []}
    for first, stop, pad, y, weights in parts:
        n = pad or stop - first
        state = dict(
            x=objective.batch_rows(start, first, stop, pad),
            i=engine.scalar_int(-1),
            seed=backend.seed_state(int(rng.integers(2**31 - 1))),
        )
        per_row = dict(
            values=np.full(n, -np.inf, np.float32),
            success=np.zeros(n, bool),
            active=np.ones(n, bool),
            used=np.zeros(n, np.int32),
        )
        state.update({k: objective.batch_rows(a, 0, n, None) for k, a in per_row.items()})
        fixed = dict(tensors, y=y, weights=weights)
        fixed.update({k: objective.batch_rows(a, first, stop, pad) for k, a in rows.items()})
        state = _advance(step, (trainables, non_trainables), state, fixed, n_queries)
        for key in out:
            out[key].append(engine.to_host(state[key], stop - first))
    used = np.concatenate(out["used"]).astype(np.int64)
    frame.n_forwards += int(used.sum())
    return np.concatenate(out["x"]), np.concatenate(out["success"]), used


def _step(objective, image, sample, layout, *, norm, targeted, clip, mask):
    """The step as `(propose, keep, draws)` (`backend.compile_search`): `propose(state, fixed, u)` the
    candidate from `draws` uniform numbers per row, then `keep(state, fixed, candidate, (values,
    logits))` the next state: a candidate is kept where its loss rises or it succeeds. `image` is the
    channels-last view `(h, w, c)` of a sample of shape `sample` in `layout`."""
    first = layout == "channels_first" and len(sample) >= 2
    last = (*sample[1:], sample[0]) if first else sample

    def propose(state, fixed, u):
        x = state["x"]
        best = ops.reshape(ops.moveaxis(x, 1, -1) if first else x, (-1,) + image)
        cand = ops.reshape(_propose(state, fixed, u, best, norm, clip), (-1,) + tuple(last))
        return ops.moveaxis(cand, -1, 1) if first else cand

    def keep(state, fixed, cand, aux):
        values, logits = aux
        labels, targets = fixed["y"]
        decision = objective.decide_tensor(logits, fixed["weights"]["alpha"])
        hit = decision == targets if targeted else decision != labels
        active = ops.logical_and(state["active"], fixed["weights"]["rows"] > 0)
        better = ops.logical_and(active, ops.logical_or(values > state["values"], hit))
        new = dict(state, i=state["i"] + 1)
        new["x"] = engine.select_rows(better, cand, state["x"])
        new["values"] = ops.where(better, values, state["values"])
        new["success"] = ops.logical_or(state["success"], ops.logical_and(active, hit))
        new["used"] = state["used"] + ops.cast(active, "int32")
        new["active"] = ops.logical_and(active, ops.logical_not(hit))
        return new

    return propose, keep, draws(norm, image[-1])


def _propose(state, fixed, u, best, norm, clip):
    """A candidate `(n, h, w, c)` for every row of the channels-last images `best` from the uniform
    draws `u`; at the first step (`i < 0`) the start itself (Linf: an empty window, no pass over the
    batch of its own)."""
    first = state["i"] < 0
    stage = ops.sum(ops.cast(state["i"] >= fixed["starts"], "int32"))
    sides = ops.take(fixed["sides"], stage, axis=0)
    if norm == np.inf:
        return linf_proposal(best, (fixed["plus"], fixed["minus"]), sides, u, empty=first)
    bounds = (fixed["lo"], fixed["hi"]) if clip else None
    proposal = l1_proposal if norm == 1 else l2_proposal
    args = (fixed["x0"], fixed["eps"], fixed["patterns"], stage, sides, u, bounds, fixed.get("mask"))
    return ops.where(first, best, proposal(best, *args))


def _advance(step, variables, state, fixed, n_queries):
    """`n_queries` steps (the start's evaluation first), stopping at a check where no row is attacked."""
    for done in range(0, n_queries, CHECK_EVERY):
        state = engine.advance(step, variables, state, fixed, min(CHECK_EVERY, n_queries - done))
        if done + CHECK_EVERY < n_queries and not bool(backend.to_numpy(ops.any(state["active"]))):
            break
    return state


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
    the first stages of `p`'s schedule a window is a few pixels of the image."""
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

    `ends` are the two clipped corners `[x0 + eps, x0 - eps]` (`linf_ends`), `sides` the window's
    `(sh, sw)`; signs are redrawn (up to `REDRAWS` draws) where they would not change the window
    (`window_sums`). `empty` (a bool scalar tensor, or None): where true, the window is empty and the
    proposal is `best` itself."""
    n, h, w, c = best.shape
    top, left = _corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
    in_rows, in_cols, _, _ = _edges(top, left, sides[0], sides[1], h, w)
    if empty is not None:
        in_rows = ops.logical_and(in_rows, ops.logical_not(empty))
    tolerance = 1e-7 * ops.cast(sides[0] * sides[1], "float32")
    sign_draws = ops.transpose(ops.reshape(u[:, 2:], (n, REDRAWS, c)), (1, 0, 2)) < 0.5

    def signs(unchanged):  # (n, c): the channels that take the + corner
        return _first_change(sign_draws, unchanged)

    def candidate(best, ends, in_rows, in_cols, tolerance, signs):
        m = _channels(ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)))
        unchanged = window_sums(best, ends, top, left, sides, empty) < tolerance  # (2, n, c)
        plus = ops.expand_dims(ops.expand_dims(signs(unchanged), 1), 1)
        return ops.where(m > 0, ops.where(plus, ends[0], ends[1]), best)

    # `backend.linf_window`: the same values in one buffer
    return engine.fast_path("linf_window", candidate)(best, ends, in_rows, in_cols, tolerance, signs)


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


def l2_proposal(best, x0, eps, patterns, stage, sides, u, bounds, mask=None):
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
    delta = ops.where(m1 > 0, new, ops.where(m2 > 0, 0.0, delta)) * (1.0 if mask is None else mask)
    delta = eps * delta / ops.maximum(geometry.per_sample_norm_tensor(delta), geometry.TINY)
    return geometry.project_and_clip_tensor(x0 + delta, x0, eps, 2, bounds)


def l1_proposal(best, x0, eps, patterns, stage, sides, u, bounds, mask=None):
    """AutoAttack's L1 update: window 1 gets the L1 bump plus its old content, scaled to the budget left
    plus both windows' mass; window 2 is emptied; then the exact projection onto the L1-ball and the
    box; `u` the draws."""
    c = best.shape[-1]
    m1, m2, bump = _two_windows(best, patterns, stage, sides, u)
    eps = ops.cast(eps, "float32")
    delta = best - x0
    norm_w1, norm_both = _sums(delta * m1, 1), _sums(delta * ops.maximum(m1, m2), 1)
    room = ops.maximum(eps - ops.sum(ops.abs(delta), axis=(1, 2, 3), keepdims=True), 0.0) / c
    new = bump + delta * m1 / (1e-12 + norm_w1)
    new = new / (1e-12 + _sums(new, 1)) * (room + norm_both) * c
    delta = ops.where(m1 > 0, new, ops.where(m2 > 0, 0.0, delta)) * (1.0 if mask is None else mask)
    return geometry.project_and_clip_tensor(x0 + delta, x0, eps, 1, bounds)


# ---------------------------------------------------------------------------------------------------
# On the host (numpy): the schedule, the patterns and the start.


def p_schedule(p_init, iteration, n_queries):
    """The fraction `p` of pixels changed at `iteration` (0-based): `p_init` halved after each mark."""
    it = int(iteration / n_queries * 10000)
    return p_init / 2 ** sum(it > mark for mark in HALVINGS)


def schedule(p_init, n_queries, h, w, norm):
    """`(starts (9,) int32, sides (10, 2) int32, patterns (10, 2, h, w) float32)`: the first iteration
    of each halving of `p` (`n_queries` where it is never reached), each stage's window side and, for
    L2 and L1, its patterns `eta` and `eta.T` at the canvas' corner (zeros for Linf)."""
    it = (np.arange(max(n_queries - 1, 0)) / n_queries * 10000).astype(np.int64)  # as `p_schedule`
    stage = sum((it > mark).astype(np.int64) for mark in HALVINGS)
    starts = [int(np.argmax(stage >= k)) if np.any(stage >= k) else n_queries for k in range(1, STAGES)]
    sides = np.zeros((STAGES, 2), np.int32)
    patterns = np.zeros((STAGES, 2, h, w), np.float32)
    for k in range(STAGES):
        p = p_init / 2**k
        sides[k] = window_sides(p, h, w) if norm == np.inf else window_sides(p, h, w, minimum=3, odd=True)
        if norm != np.inf:
            sh, sw = sides[k]
            pattern = eta(sh, sw, 1 if norm == 1 else 2)  # L1's bumps fall off faster
            patterns[k, 0, :sh, :sw] = pattern
            patterns[k, 1, :sh, :sw] = pattern.T if sh == sw else pattern
    return np.asarray(starts, np.int32), sides, patterns


def _constants(clip, x0, eps, norm, n_queries, p_init, rng, layout="channels_last", mask=None):
    """`(start, per-row constants on the host, scalar and table tensors)` of an attack; the start in
    `x0`'s layout, the per-row constants as channels-last images."""
    img0 = as_image(channels_last(x0, layout))
    init = {np.inf: linf_init, 2.0: l2_init, 1.0: l1_init}[norm]
    start = from_channels_last(
        geometry.project_and_clip(init(img0, eps, rng), img0, eps, norm, clip, mask), x0, layout
    )
    if norm == np.inf:
        rows = dict(zip(("plus", "minus"), linf_ends(img0, eps, clip, mask)))
    else:
        rows = {"x0": img0}
    starts, sides, patterns = schedule(p_init, n_queries, *img0.shape[1:3], norm)
    lo, hi = clip or (0.0, 0.0)
    tensors = {k: engine.scalar(v) for k, v in dict(eps=eps, lo=lo, hi=hi).items()}
    tensors.update(starts=backend.to_tensor(starts), sides=backend.to_tensor(sides))
    if norm != np.inf:
        tensors["patterns"] = backend.to_tensor(patterns)
    if mask is not None:
        tensors["mask"] = backend.to_tensor(mask)
    return start, rows, tensors


def channels_last(x, layout):
    """`x` `(n, ...)` with a channels-first image's channel axis (axis 1) moved last; `x` itself for
    "channels_last" and for flat rows `(n, d)`."""
    return np.moveaxis(x, 1, -1) if layout == "channels_first" and x.ndim >= 3 else x


def from_channels_last(img, like, layout):
    """The images `img` `(n, h, w, c)` back in the shape and layout of `like` (`channels_last`'s
    inverse after `as_image`)."""
    if layout == "channels_first" and like.ndim >= 3:
        return np.moveaxis(img.reshape(channels_last(like, layout).shape), -1, 1)
    return img.reshape(like.shape)


def as_image(x):
    """A view of channels-last `x` `(n, ...)` as images `(n, h, w, c)` (see the module docstring)."""
    if x.ndim == 4:
        return x
    if x.ndim == 3:
        return x[..., None]
    if x.ndim == 2:
        d = x.shape[1]
        h = max(k for k in range(1, int(np.sqrt(d)) + 1) if d % k == 0)
        return x.reshape(len(x), h, d // h, 1)
    return x.reshape(x.shape[:3] + (-1,))


def window_sides(p, h, w, minimum=1, odd=False):
    """The window sides `(sh, sw)` for the fraction `p` of an `h x w` image."""
    s = max(int(round(np.sqrt(p * h * w))), minimum)
    s += int(odd and s % 2 == 0)
    return min(s, h), min(s, w)


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


def random_signs(rng, shape):
    """Random signs in {-1.0, 1.0} (`rng.integers(0, 2)` mapped; the stream of `rng.choice([-1, 1])`)."""
    return rng.integers(0, 2, size=shape) * 2.0 - 1.0


def linf_init(x0, eps, rng):
    """Vertical stripes: `x0 + eps * s`, one sign per (sample, column, channel); `eps` may be an image."""
    n, _, w, c = x0.shape
    return x0 + (eps * random_signs(rng, (n, 1, w, c))).astype(x0.dtype)


def l2_init(x0, eps, rng, norm=2):
    """Tiles of side `min(h, w) // 5` carrying `eta` with random signs per (sample, tile, channel),
    scaled to the L2 eps-sphere (L1, `norm=1`: the L1 patterns, each tile of unit L1 norm, left for the
    caller's projection onto the L1-ball and the box, as AutoAttack's L1 start)."""
    n, h, w, c = x0.shape
    s = max(min(h, w) // 5, 1)
    nh, nw = h // s, w // s
    tiles = np.stack([eta(s, s, norm), eta(s, s, norm).T])[rng.integers(0, 2, size=(nh, nw))]
    grid = tiles.transpose(0, 2, 1, 3).reshape(nh * s, nw * s)
    tile_signs = np.repeat(np.repeat(random_signs(rng, (n, nh, nw, c)), s, axis=1), s, axis=2)
    delta = np.zeros(x0.shape)
    oh, ow = (h - nh * s) // 2, (w - nw * s) // 2
    delta[:, oh : oh + nh * s, ow : ow + nw * s] = grid[None, :, :, None] * tile_signs
    if norm == 1:
        return x0 + delta.astype(x0.dtype)
    return x0 + (eps * delta / np.maximum(geometry.per_sample_norm(delta), geometry.TINY)).astype(x0.dtype)


def l1_init(x0, eps, rng):
    """AutoAttack's L1 start: `l2_init`'s grid with the L1 patterns (projected by the caller)."""
    return l2_init(x0, eps, rng, norm=1)


def linf_ends(x0, eps, clip_values, mask=None):
    """The two corners `[x0 + eps, x0 - eps]`, each projected and clipped, that Linf windows take."""
    e = x0.dtype.type(eps)
    return [geometry.project_and_clip(x0 + e * s, x0, eps, np.inf, clip_values, mask) for s in (1, -1)]
