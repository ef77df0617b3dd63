"""The Fast Adaptive Boundary attack (FAB; Croce & Hein 2020, Algorithm 1), and FAB-T as in AutoAttack,
for the Linf, L2 and L1 norms: per sample the smallest adversarial example it finds, or (with eps) one
inside the eps-ball.

Algorithm. At the iterate `x_k` it linearizes the differences of logits `f_j = z_j - z_y` (their
Jacobian rows `w_j = grad f_j`, one gradient per class; FAB-T: the target's only), picks the class
whose linearized boundary is closest, `|f_j| / ||w_j||_q` (q the dual norm), and projects both the
iterate and the clean input `x0` onto that hyperplane inside the box (`project`, the exact
minimal-norm step `d`). With `eta` the overshoot and `alpha = min(||d_x|| / (||d_x|| + ||d_0||),
alpha_max)`:

    x' = (1 - alpha)(x_k + eta d_x) + alpha (x0 + eta d_0),     clipped to the box

Where `x'` is adversarial (the model's real decision rule, one forward pass) it is recorded if closer
than the best so far, and the iterate steps back: `x_{k+1} = x0 + beta (x' - x0)`; else `x_{k+1} = x'`.
The first run starts at `x0`; each further restart from a random point at half the norm of the best
example found so far (at most eps, or AutoAttack's 0.3 / 1 / 5 for Linf / L2 / L1 without it).

The projection (the problems of eq. 4 and 5): flip signs so that `c = w . t - b >= 0`; coordinate i
lowers `w . d` by `|w_i| e_i` with `d_i = -sign(w_i) e_i`, `0 <= e_i <= m_i` (the room to the bound it
moves towards); minimizing `||e||_p` subject to `sum |w_i| e_i = c` gives Linf `e_i = min(lambda, m_i)`
and L2 (KKT) `e_i = min(lambda |w_i|, m_i)`, `lambda` where the reached decrease `g(lambda)` (piecewise
linear, concave) crosses `c`, found by Newton's method from 0 (no sort); L1 is a fractional knapsack
(fill by decreasing `|w_i|`). Without a box: `-c sign(w) / ||w||_1`, `-c w / ||w||_2^2`, and `-c / w_k`
on one coordinate of largest `|w_k|`. Where the box does not reach the hyperplane, the `d` that moves
`w . (t + d)` furthest towards `b`.

Each step is one compiled call with C gradient rows per sample (1 for FAB-T) and one forward pass;
the state stays on the device and the host reads the result once, at the end of a run.

References:
    Croce & Hein (2020), "Minimally distorted adversarial examples with a fast adaptive boundary
    attack", ICML, https://arxiv.org/abs/1907.02044 (Algorithm 1, Section 3; reference code:
    fra31/auto-attack, `autoattack/fab_base.py`, `fab_projections.py`).
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (FAB-T).
"""

import math

import numpy as np
from keras import ops

from gradkit import _checks, backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import geometry
from gradkit.attacks._frame import Frame, step_function
from gradkit.gradients import AttackGradient, cached

RESTART_RADIUS = {np.inf: 0.3, 2.0: 1.0, 1.0: 5.0}  # AutoAttack's default eps, for [0, 1] inputs
STACKED_VALUES = 1 << 24  # input values of FAB-T's targets run together (64 MB per float32 array)
_VALUES_PER_CALL = 1 << 22  # the default batch: samples whose repeated rows hold at most this many values
_FAR = 1e30  # the ratio of the label's own row, never chosen; the breakpoint of a coordinate with w_i = 0


def fab(
    model,
    x,
    y=None,
    *,
    norm=np.inf,
    eps=None,
    targeted=False,
    n_target_classes=9,
    steps=100,
    n_restarts=1,
    alpha_max=0.1,
    eta=1.05,
    beta=0.9,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    batch_size=None,
    seed=0,
    output=None,
    objective="loss_sum",
    preprocessing=None,
):
    """Fast Adaptive Boundary attack (Croce & Hein 2020): per sample, the smallest adversarial example
    it finds, in the Linf, L2 or L1 norm; FAB-T with `targeted=True`. The algorithm is in
    `gradkit.attacks.fab`'s module docstring.

    Targeted (FAB-T, AutoAttack's "fab-t"): one run per target among the `n_target_classes` classes
    most likely after the label (clean logits), `n_restarts` each; `y` holds the TRUE labels and any
    misclassification counts, as in AutoAttack.

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a fitted boosting
            estimator. Probability outputs are read through the logits before a final softmax where the
            graph shows one, else as log-probabilities.
        x: float32 `(n, *input_shape)` in the model's input units, inside `clip_values`.
        y: true class ids `(n,)` or one-hot `(n, C)`. Defaults to the model's predictions.
        norm: `np.inf` (default), `2` or `1` (or "linf", "l2", "l1"): the norm minimized.
        eps: None (default): the minimum-norm attack (every run on every correctly classified point); a
            float >= 0: the eps-bounded attack (a point counts as broken once its example lies in the
            eps-ball, and later runs attack only the points still robust, as AutoAttack).
        targeted: False (default) or True (FAB-T; needs >= 3 classes).
        n_target_classes: targets of FAB-T, int >= 1; more than C - 1 means C - 1 (as APGD-T). Defaults
            to 9 (AutoAttack's value).
        steps: iterations per run, int >= 1. Defaults to 100 (AutoAttack's and adv-lib's value).
        n_restarts: runs per target (the first from `x`), int >= 1. Defaults to 1.
        alpha_max: the largest weight of the step from `x0`, in [0, 1]. Defaults to 0.1.
        eta: overshoot of the projections, > 0. Defaults to 1.05.
        beta: the backward step towards `x0` after a success, in [0, 1]. Defaults to 0.9.
        clip_values: None or `(min, max)`, the valid input range (the box of the projections); or
            per-feature arrays. mask, attack_inputs: as in `gradkit.apgd` (the norms are those of the
            changeable features).
        batch_size: samples per compiled call (each takes `C` rows untargeted, 1 targeted). Defaults to
            None: min(256, next power of two >= n), at most 2**22 input values per call.
        seed: None or int >= 0 seeding the restarts' random starts (numpy). Defaults to 0.
        output: name or index of the attacked output of a multi-output model.
        objective: how an ensemble's members are combined into the differences of logits, as in
            `gradkit.bim` ("loss_sum": the weighted sum of the members' differences; "vote_margin": the
            difference of the smoothed weighted vote). Defaults to "loss_sum".
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest adversarial example found, or the clean `x`
        where none was found (with `eps`: where none lies inside the eps-ball); a clean point already
        misclassified is returned as is. In `clip_values`. Inside `gradkit.attacks.recording()` the
        record's `norms` (float64 `(n,)`: 0 where misclassified clean, inf where none was found) and
        `success` say what was found.

    Raises:
        ValueError: a norm other than inf, 2, 1; eps < 0; steps, n_restarts or n_target_classes < 1;
            alpha_max, beta outside [0, 1]; eta <= 0; FAB-T on fewer than 3 classes; labels out of
            range; `x` outside `clip_values`. Before any attack step.
        TypeError: several inputs of an ensemble, non-integer counts, a non-bool `targeted`, a bad `model`.

    References:
        Croce & Hein (2020), https://arxiv.org/abs/1907.02044 (Algorithm 1, Section 3); Croce & Hein
        (2020), https://arxiv.org/abs/2003.01690 (FAB-T).

    Example:
        >>> x_adv = gradkit.fab(model, x, y, norm=2, clip_values=(0, 1))  # doctest: +SKIP
    """
    args = _check(norm, eps, targeted, n_target_classes, steps, n_restarts, alpha_max, eta, beta, seed)
    frame = Frame(
        model,
        x,
        y,
        loss="ce",
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        batch_size=batch_size,
        output=output,
        objective=objective,
        single_input="FAB",
        preprocessing=preprocessing,
    )
    _check_classes(args["targeted"], frame.n_classes)
    options = dict(batch_size=frame.batch_size, output=output, objective=objective)
    x0, norm, eps = frame.x0, args["norm"], args["eps"]
    correct = frame.predict(x0) == frame.labels
    best, best_norm = x0.copy(), np.where(correct, np.inf, 0.0)
    n_targets = min(args["n_target_classes"], frame.n_classes - 1)  # never the label, as APGD-T
    ranks = frame.top_classes(n_targets) if args["targeted"] else None
    rng = np.random.default_rng(args["seed"])
    for restart in range(args["n_restarts"]):
        for group in _groups(ranks, len(x0), math.prod(x0.shape[1:])):
            idx = np.flatnonzero(correct if eps is None else correct & ~(best_norm <= eps))
            if not len(idx):
                break
            rows = np.tile(idx, len(group))  # target-major: the rows of target j are rows j*m:(j+1)*m
            targets = None if ranks is None else ranks[idx][:, group].T.reshape(-1)
            start = x0[rows]
            if restart:
                radius = np.minimum(best_norm[rows], RESTART_RADIUS[norm] if eps is None else eps)
                start = frame.keep_masked(_random_start(start, radius, norm, frame.clip_values, rng), start)
            adv, size = run_rows(frame, rows, start, targets, args, options)
            adv, size = adv.reshape((len(group), len(idx)) + x0.shape[1:]), size.reshape(len(group), -1)
            first, cols = size.argmin(axis=0), np.arange(len(idx))  # each point's closest target
            adv, size = adv[first, cols], size[first, cols]
            better = size < best_norm[idx]
            best[idx[better]], best_norm[idx[better]] = adv[better], size[better]
    found = np.isfinite(best_norm) & correct
    best, found = engine.past_boundary(frame, np.where(engine.rows_mask_host(found, x0), best, x0), found)
    frame.norms = np.where(correct, np.inf, 0.0)
    frame.norms[found] = geometry.norms(best[found].astype(np.float64) - x0[found].astype(np.float64), norm)
    frame.success = ~correct | (found if eps is None else found & (frame.norms <= eps))
    x_adv = np.where((frame.success & correct).reshape((-1,) + (1,) * (x0.ndim - 1)), best, x0)
    return frame.finish(x_adv.astype(np.float32))


def _check(norm, eps, targeted, n_target_classes, steps, n_restarts, alpha_max, eta, beta, seed):
    return dict(
        norm=_checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS),
        eps=None if eps is None else _checks.check_eps(eps),
        targeted=_checks.check_flag(targeted, "targeted"),
        n_target_classes=_checks.check_int(n_target_classes, "n_target_classes", minimum=1),
        steps=_checks.check_steps(steps),
        n_restarts=_checks.check_int(n_restarts, "n_restarts", minimum=1),
        alpha_max=_checks.check_real(alpha_max, "alpha_max", minimum=0, maximum=1),
        eta=_checks.check_real(eta, "eta", minimum=0, strict=True),
        beta=_checks.check_real(beta, "beta", minimum=0, maximum=1),
        seed=_checks.check_seed(seed),
    )


def _check_classes(targeted, n_classes):
    if targeted and n_classes < 3:
        raise ValueError(
            f"`targeted`=True (FAB-T) needs at least 3 classes (with 2 the only target is the untargeted "
            f"attack); the model has {n_classes}. Use targeted=False."
        )


def _random_start(x0, radius, norm, bounds, rng):
    """AutoAttack's restart: x0 plus a random direction of norm radius / 2 (Linf uniform, else gaussian)."""
    t = rng.uniform(-1, 1, x0.shape) if norm == np.inf else rng.standard_normal(x0.shape)
    scale = geometry.norms(t, norm).reshape((-1,) + (1,) * (x0.ndim - 1))
    start = x0 + (0.5 * radius.reshape(scale.shape) * t / np.maximum(scale, geometry.TINY)).astype(np.float32)
    return start if bounds is None else np.clip(start, bounds[0], bounds[1]).astype(np.float32)


def _groups(ranks, n, features):
    """The target columns run together (one run over their stacked rows; rows are independent, so the
    same as one run per target with fewer calls), each group at most 2**24 input values; `[[None]]`
    untargeted."""
    if ranks is None:
        return [[None]]
    size = max(1, STACKED_VALUES // max(n * features, 1))
    columns = list(range(ranks.shape[1]))
    return [columns[i : i + size] for i in range(0, len(columns), size)]


def run_rows(frame, idx, start, targets, args, options):
    """One FAB run on the rows `idx` of the frame (repeats allowed) from `start`, towards `targets`
    (aligned with `idx`; None untargeted): `(best, best_norm)` of those rows; the cost is counted."""
    n_classes, m = frame.n_classes, len(idx)
    n_rows = 1 if targets is not None else n_classes
    batch = _batch(options["batch_size"], m, n_rows, math.prod(frame.x0.shape[1:]))
    size = -(-m // batch) * batch
    x0, start = _padded(frame.x0[idx], size), _padded(start, size)
    labels = _padded(frame.labels[idx], size)
    rows = np.tile(np.arange(n_classes), size) if targets is None else _padded(targets, size)
    objective = _objective(frame.owner, options["objective"], options["output"], batch * n_rows)
    best, best_norm = run(
        objective,
        x0,
        start,
        labels,
        rows.astype(np.int32),
        norm=args["norm"],
        steps=args["steps"],
        bounds=frame.clip_values,
        mask=frame.mask,
        n_rows=n_rows,
        alpha_max=args["alpha_max"],
        eta=args["eta"],
        beta=args["beta"],
        batch=batch,
    )
    frame.n_gradients += m * n_rows * args["steps"]
    frame.n_forwards += m * args["steps"]
    return best[:m], best_norm[:m]


def run(
    objective,
    x0,
    start,
    labels,
    targets,
    *,
    norm,
    steps,
    bounds,
    n_rows,
    alpha_max,
    eta,
    beta,
    batch,
    mask=None,
):
    """One FAB run from `start` on `x0` `(m, ...)` (m a multiple of `batch`): `(best (m, ...), best_norm
    (m,))`, the smallest adversarial iterate per sample (best_norm inf where none was met).

    `objective` is the "logit_diff" `AttackGradient` (targeted: it reads the targets) compiled for
    `batch * n_rows` rows; `targets` `(m * n_rows,)` hold every class (`n_rows` = C) or the target.
    Per-feature `bounds` and the `mask` are arrays `(1, ...)` (flattened here, as FAB's steps are).
    """
    step = step_function(
        objective,
        "fab",
        update(objective, norm, n_rows, bounds is not None),
        mask,
        norm=norm,
        n_rows=n_rows,
        clip=bounds is not None,
    )
    lo, hi = (np.reshape(b, (1, -1)) if np.ndim(b) else b for b in bounds or (0.0, 0.0))
    scalars = dict(lo=lo, hi=hi, alpha_max=alpha_max, eta=eta, beta=beta)
    constants = {k: engine.scalar(v) for k, v in scalars.items()}
    if mask is not None:  # the gradient is masked in x's shape
        constants["mask"] = backend.to_tensor(mask)
    variables, parts = objective.fixed(np.repeat(labels, n_rows), targets)
    flat = math.prod(x0.shape[1:])
    best, best_norm = [], []
    for k, (first, stop, pad, y, weights) in enumerate(parts):
        rows = slice(k * batch, (k + 1) * batch)
        state = dict(
            x=objective.batch_rows(np.repeat(start[rows], n_rows, axis=0), 0, stop - first, pad),
            best=backend.to_tensor(np.ascontiguousarray(x0[rows].reshape(batch, flat))),
            best_norm=backend.to_tensor(np.full(batch, np.inf, np.float32)),
        )
        fixed = dict(constants, y=y, weights=weights, variables=variables, x0=backend.to_tensor(x0[rows]))
        state = engine.advance(step, variables, state, fixed, steps)
        best.append(backend.to_numpy(state["best"]).reshape((batch,) + x0.shape[1:]))
        best_norm.append(backend.to_numpy(state["best_norm"]))
    return np.concatenate(best), np.concatenate(best_norm)


def update(objective, norm, n_rows, clip):
    """The step's update `update(state, (values, logits), grad, fixed) -> state` (Algorithm 1)."""

    def step(state, aux, grad, fixed):
        values, _ = aux
        df, dg, same = _rows_of(values, grad, fixed["y"], n_rows)
        x0 = fixed["x0"]
        shape, b = tuple(x0.shape), x0.shape[0]
        p = ops.reshape(state["x"], (b, n_rows, -1))[:, 0]
        x0_flat = ops.reshape(x0, (b, -1))
        bounds = (fixed["lo"], fixed["hi"]) if clip else None
        f, w = _pick(df, dg, same, norm)
        x_new = _move(p, x0_flat, f, w, fixed, norm, bounds)
        logits = ops.stack(objective.member_logits(*fixed["variables"], ops.reshape(x_new, shape)))
        labels = ops.reshape(fixed["y"][0], (b, n_rows))[:, 0]
        hit = objective.decide_tensor(logits, fixed["weights"]["alpha"]) != labels
        size = geometry.lp_norm(x_new - x0_flat, norm)
        better = ops.logical_and(hit, size < state["best_norm"])
        new = dict(state)
        new["best"] = ops.where(ops.expand_dims(better, -1), x_new, state["best"])
        new["best_norm"] = ops.where(better, size, state["best_norm"])
        back = x0_flat + fixed["beta"] * (x_new - x0_flat)
        x_next = ops.where(ops.expand_dims(hit, -1), back, x_new)
        new["x"] = ops.repeat(ops.reshape(x_next, shape), n_rows, axis=0)
        return new

    return step


def _rows_of(values, grad, y, n_rows):
    """Per sample and row: the differences of logits `(b, n_rows)`, their gradients `(b, n_rows, D)`,
    and where the row's class is the label itself `(b, n_rows)` bool."""
    labels, targets = y
    b = values.shape[0] // n_rows
    df = ops.reshape(values, (b, n_rows))
    dg = ops.reshape(grad, (b, n_rows, -1))
    return df, dg, ops.reshape(labels == targets, (b, n_rows))


def _pick(df, dg, same, norm):
    """`(f (b,), w (b, D))` of the class whose linearized boundary is closest in the attack's norm."""
    if df.shape[1] == 1:  # FAB-T: the target's row (never the label)
        return df[:, 0], dg[:, 0]
    ratio = ops.abs(df) / (geometry.lp_norm(dg, geometry.DUAL[float(norm)]) + geometry.TINY)
    ratio = ops.where(same, _FAR, ratio)
    best = ops.cast(ops.argmin(ratio, axis=1), "int32")
    pick = ops.cast(ops.expand_dims(best, -1) == ops.arange(df.shape[1], dtype="int32"), df.dtype)
    return ops.sum(df * pick, axis=1), ops.sum(dg * ops.expand_dims(pick, -1), axis=1)


def _move(p, x0, f, w, fixed, norm, bounds):
    """The biased FAB step from `p` `(b, D)` for the hyperplane `w . (z - p) + f = 0`."""
    b = p.shape[0]
    c0 = f + ops.sum(w * (x0 - p), axis=1)  # the offset seen from the clean input
    d = project(ops.concatenate([p, x0]), ops.concatenate([w, w]), ops.concatenate([f, c0]), norm, bounds)
    size = ops.maximum(geometry.lp_norm(d, norm), 1e-8)
    a1, a2 = size[:b], size[b:]
    alpha = ops.expand_dims(ops.minimum(ops.maximum(a1 / (a1 + a2), 0.0), fixed["alpha_max"]), -1)
    eta = fixed["eta"]
    x_new = (p + eta * d[:b]) * (1.0 - alpha) + (x0 + eta * d[b:]) * alpha
    if bounds is not None:
        x_new = ops.clip(x_new, bounds[0], bounds[1])
    return x_new


def project(t, w, c, norm, bounds):
    """The smallest step `d` `(N, D)` from `t` onto `{z: w . z = w . t - c}` inside `bounds` (see the
    module docstring).

    Args:
        t, w: float32 `(N, D)` points and hyperplane normals; c: float32 `(N,)`, `w . t - b`.
        norm: np.inf, 2.0 or 1.0. bounds: None (no box) or `(lo, hi)` scalar tensors.

    Returns:
        float32 `(N, D)`; zero on the coordinates where `w` is zero.
    """
    if bounds is None:
        return _free(w, c, norm)
    sign = ops.where(c >= 0, 1.0, -1.0)
    w, c = w * ops.expand_dims(sign, -1), c * sign  # now c >= 0: lower w . d by c
    lo, hi = ops.cast(bounds[0], t.dtype), ops.cast(bounds[1], t.dtype)
    room = ops.maximum(ops.where(w > 0, t - lo, hi - t), 0.0)
    aw = ops.abs(w)
    e = _knapsack(aw, room, c) if norm == 1 else _breakpoints(aw, room, c, norm)
    return ops.where(aw > 0, -ops.sign(w) * e, 0.0)


def _free(w, c, norm):
    c = ops.expand_dims(c, -1)
    if norm == np.inf:
        return -c * ops.sign(w) / ops.maximum(ops.sum(ops.abs(w), axis=-1, keepdims=True), geometry.TINY)
    if norm == 2:
        return -c * w / ops.maximum(ops.sum(ops.square(w), axis=-1, keepdims=True), geometry.TINY)
    top = ops.argmax(ops.abs(w), axis=-1)
    pick = ops.expand_dims(ops.cast(top, "int32"), -1) == ops.arange(w.shape[-1], dtype="int32")
    safe = ops.where(ops.abs(w) > 0, w, 1.0)
    return ops.where(pick, -c / safe, 0.0)


def _breakpoints(aw, room, c, norm):
    """Linf and L2: `e_i = min(lambda s_i', m_i)` with lambda where the reached decrease crosses c.

    The reached decrease `g` is concave, so Newton's method from `lambda = 0` walks its segments from
    below: on the segment of the breakpoints passed so far (`r_i <= lambda`: at their bound) the root is
    `(c - done) / rate` (`done` the decrease of those, `rate` the slope of the others); each step passes
    at least one breakpoint until none lies before that root, which is then exact. A handful of passes
    over the coordinates, where a sort of every row would dominate FAB's step."""
    if norm == np.inf:
        slope, r = aw, ops.where(aw > 0, room, _FAR)
    else:
        slope, r = ops.square(aw), ops.where(aw > 0, room / ops.maximum(aw, geometry.TINY), _FAR)
    full = aw * room  # the decrease of a coordinate at its bound

    def root(lam):
        passed = r <= ops.expand_dims(lam, -1)
        done = ops.sum(ops.where(passed, full, 0.0), axis=-1)
        rate = ops.sum(ops.where(passed, 0.0, slope), axis=-1)
        return ops.where(rate > 0, (c - done) / ops.maximum(rate, geometry.TINY), _FAR)

    def crossed(lam, new):  # a breakpoint in (lam, new]: the segment of `new` is not that of `lam`
        inside = ops.logical_and(r > ops.expand_dims(lam, -1), r <= ops.expand_dims(new, -1))
        return ops.any(inside, axis=-1)

    def body(lam, new, moved):  # `moved`: rows whose root passed a breakpoint (computed once a pass)
        lam = ops.where(moved, new, lam)
        new = root(lam)
        return lam, new, crossed(lam, new)

    lam = ops.zeros_like(c)
    new = root(lam)
    _, lam, _ = ops.while_loop(lambda lam, new, moved: ops.any(moved), body, (lam, new, crossed(lam, new)))
    lam = ops.expand_dims(lam, -1)
    step = lam if norm == np.inf else lam * aw
    return ops.minimum(step, room)


def _knapsack(aw, room, c):
    """L1: fill the coordinates by decreasing |w_i|, each up to its room, until the decrease is c."""
    order = ops.argsort(-aw, axis=-1)
    aw_s = ops.take_along_axis(aw, order, axis=-1)
    room_s = ops.take_along_axis(room, order, axis=-1)
    cap = aw_s * room_s
    before = ops.cumsum(cap, axis=-1) - cap
    e_s = ops.minimum(
        ops.maximum((ops.expand_dims(c, -1) - before) / ops.maximum(aw_s, geometry.TINY), 0.0), room_s
    )
    e_s = ops.where(aw_s > 0, e_s, 0.0)
    return ops.take_along_axis(e_s, ops.argsort(order, axis=-1), axis=-1)


def _objective(owner, objective, output, rows):
    """The cached "logit_diff" objective compiled for `rows` rows per call."""
    options = dict(
        loss="logit_diff",
        combination=objective,
        targeted=True,
        output=output,
        batch_size=rows,
        temperature=1.0,
    )

    def factory():
        return AttackGradient(owner, **options)

    return cached(owner, "attack", factory, **options)


def _batch(batch_size, n, n_rows, features):
    """Samples per compiled call: `batch_size`, else as the frame's `default_batch` chooses rows
    (min(256, next power of two >= n); where a new row count is cheap, n rounded up to
    `backend.ROW_QUANTUM`), capped so that their `n_rows` rows hold at most 2**22 input values."""
    if batch_size:
        return batch_size
    cap = max(1, _VALUES_PER_CALL // max(n_rows * features, 1))
    quantum = backend.ROW_QUANTUM
    wanted = -(-n // quantum) * quantum if quantum else min(256, 1 << max(n - 1, 0).bit_length())
    return max(1, min(cap, wanted))


def _padded(a, size):
    """`a` with copies of its first row appended up to `size` rows."""
    return a if len(a) == size else np.concatenate([a, np.repeat(a[:1], size - len(a), axis=0)])
