"""One FAB run on the attack engine: Algorithm 1 of Croce & Hein (2020) with its state on the device.

Each compiled step evaluates, at the current iterate, the differences of logits `f_j - f_y` and their
input gradients (the Jacobian rows FAB linearizes): the iterate's row is repeated once per class `j`
(untargeted) or once for the target (FAB-T), the objective "logit_diff" gives `f_j - f_y` per row and
its gradient per row is that row's Jacobian row. The step then picks the class whose linearized
boundary is closest (`|f_j| / ||grad f_j||_q`, q the dual norm), projects the iterate and the clean
input onto that hyperplane inside the box (`_fab_projection.project`), takes the biased step
`x' = (1 - a)(x + eta d_x) + a (x0 + eta d_0)`, `a = min(||d_x|| / (||d_x|| + ||d_0||), alpha_max)`,
reads the real decision at `x'` (one forward pass), records `x'` where it is adversarial and closer
than the best so far, and there steps back towards `x0` (`x0 + beta (x' - x0)`). The host reads the
result once, at the end of the run.

References:
    Croce & Hein (2020), "Minimally distorted adversarial examples with a fast adaptive boundary
    attack", ICML, https://arxiv.org/abs/1907.02044 (Algorithm 1; reference code: fra31/auto-attack,
    `autoattack/fab_base.py`).
"""

import math

import numpy as np
from keras import ops

from gradkit import backend
from gradkit.attacks import _engine as engine
from gradkit.attacks._fab_projection import dual, lp_norm, project
from gradkit.attacks._prepare import owner
from gradkit.gradients import AttackGradient, cached

_FAR = 1e30  # the ratio of the label's own row, never chosen
_VALUES_PER_CALL = 1 << 22  # the default batch: samples whose repeated rows hold at most this many values


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
    ratio = ops.abs(df) / (lp_norm(dg, dual(norm)) + 1e-12)
    ratio = ops.where(same, _FAR, ratio)
    best = ops.cast(ops.argmin(ratio, axis=1), "int32")
    pick = ops.cast(ops.expand_dims(best, -1) == ops.arange(df.shape[1], dtype="int32"), df.dtype)
    return ops.sum(df * pick, axis=1), ops.sum(dg * ops.expand_dims(pick, -1), axis=1)


def _move(p, x0, f, w, fixed, norm, bounds):
    """The biased FAB step from `p` `(b, D)` for the hyperplane `w . (z - p) + f = 0`."""
    b = p.shape[0]
    c0 = f + ops.sum(w * (x0 - p), axis=1)  # the offset seen from the clean input
    d = project(ops.concatenate([p, x0]), ops.concatenate([w, w]), ops.concatenate([f, c0]), norm, bounds)
    size = ops.maximum(lp_norm(d, norm), 1e-8)
    a1, a2 = size[:b], size[b:]
    alpha = ops.expand_dims(ops.minimum(ops.maximum(a1 / (a1 + a2), 0.0), fixed["alpha_max"]), -1)
    eta = fixed["eta"]
    x_new = (p + eta * d[:b]) * (1.0 - alpha) + (x0 + eta * d[b:]) * alpha
    if bounds is not None:
        x_new = ops.clip(x_new, bounds[0], bounds[1])
    return x_new


def _update(objective, norm, n_rows, clip):
    def update(state, aux, grad, fixed):
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
        size = lp_norm(x_new - x0_flat, norm)
        better = ops.logical_and(hit, size < state["best_norm"])
        new = dict(state)
        new["best"] = ops.where(ops.expand_dims(better, -1), x_new, state["best"])
        new["best_norm"] = ops.where(better, size, state["best_norm"])
        back = x0_flat + fixed["beta"] * (x_new - x0_flat)
        x_next = ops.where(ops.expand_dims(hit, -1), back, x_new)
        new["x"] = ops.repeat(ops.reshape(x_next, shape), n_rows, axis=0)
        return new

    return update


def fab_device(objective, x0, start, labels, targets, *, norm, steps, bounds, n_rows, alpha_max, eta,
               beta, batch):  # fmt: skip
    """One FAB run from `start` on `x0` `(m, ...)` (m a multiple of `batch`): `(best (m, ...), best_norm
    (m,))`, the smallest adversarial iterate per sample (best_norm inf where none was met).

    `objective` is the "logit_diff" `AttackGradient` (targeted: it reads the targets) compiled for
    `batch * n_rows` rows; `targets` `(m * n_rows,)` hold every class (`n_rows` = C) or the target.
    """
    step = objective.step_function("fab", _update(objective, norm, n_rows, bounds is not None), norm=norm,
                                   n_rows=n_rows, clip=bounds is not None)  # fmt: skip
    lo, hi = bounds or (0.0, 0.0)
    scalars = dict(lo=lo, hi=hi, alpha_max=alpha_max, eta=eta, beta=beta)
    constants = {k: engine.scalar(v) for k, v in scalars.items()}
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


def _objective(model, objective, output, rows):
    """The cached "logit_diff" objective compiled for `rows` rows per call."""
    options = dict(loss="logit_diff", combination=objective, targeted=True, output=output, batch_size=rows,
                   temperature=1.0)  # fmt: skip

    def factory():
        return AttackGradient(owner(model), **options)

    return cached(owner(model), "attack", factory, **options)


def _batch(batch_size, n, n_rows, features):
    """Samples per compiled call: `batch_size`, else as `Session.default_batch` chooses rows (min(256,
    next power of two >= n); on PyTorch, where a new row count costs only a trace of milliseconds, n
    rounded up to `backend.ROW_QUANTUM`), capped so that their `n_rows` rows hold at most 2**22 input
    values."""
    if batch_size:
        return batch_size
    cap = max(1, _VALUES_PER_CALL // max(n_rows * features, 1))
    quantum = backend.ROW_QUANTUM
    wanted = -(-n // quantum) * quantum if quantum else min(256, 1 << max(n - 1, 0).bit_length())
    return max(1, min(cap, wanted))


def _padded(a, size):
    """`a` with copies of its first row appended up to `size` rows."""
    return a if len(a) == size else np.concatenate([a, np.repeat(a[:1], size - len(a), axis=0)])


def run_rows(session, model, idx, start, targets, args, options):
    """One FAB run on the rows `idx` of the session (repeats allowed) from `start`, towards `targets`
    (aligned with `idx`; None untargeted): `(best, best_norm)` of those rows; the cost is counted."""
    n_classes, m = session.n_classes, len(idx)
    n_rows = 1 if targets is not None else n_classes
    batch = _batch(options["batch_size"], m, n_rows, math.prod(session.x0.shape[1:]))
    size = -(-m // batch) * batch
    x0, start = _padded(session.x0[idx], size), _padded(start, size)
    labels = _padded(session.labels[idx], size)
    rows = np.tile(np.arange(n_classes), size) if targets is None else _padded(targets, size)
    objective = _objective(model, options["objective"], options["output"], batch * n_rows)
    best, best_norm = fab_device(
        objective, x0, start, labels, rows.astype(np.int32), norm=args["norm"], steps=args["steps"],
        bounds=session.clip_values, n_rows=n_rows, alpha_max=args["alpha_max"], eta=args["eta"],
        beta=args["beta"], batch=batch,
    )  # fmt: skip
    session.n_gradients += m * n_rows * args["steps"]
    session.n_forwards += m * args["steps"]
    return best[:m], best_norm[:m]
