"""APGD-L1's own parts on the attack engine (Croce & Hein 2021): the sparse step, the checkpoint rule of
adaptive sparsity and step size, and the decreasing-eps schedule `use_largereps`.

Step (no momentum, as in AutoAttack's L1 branch): `x_{k+1} = P(x_k + eta * s(g_k, topk))`, `s` the
sparse direction of `_l1_box.sparse_direction` (sign of the gradient on its largest `topk * d`
coordinates, unit L1 norm), `P` the exact projection onto the L1-ball intersected with the box. The
step size starts at `eps` (alpha = 1).

Checkpoints every `max(floor(0.04 * steps), 1)` iterations. At one, each sample measures the sparsity
`sp = ||x_best - x0||_0` of its best point: where it fell below 0.95 times the sparsity at the previous
checkpoint, the step size goes back to `eps` and the sample restarts from its best point (with that
point's gradient); elsewhere the step size is divided by 1.5; it stays in `[eps / 10, eps]`. The next
steps move the top `topk = sp / (1.5 d)` fraction of coordinates (`topk` starts at 0.2, `sp` at d).
A run from a given start (`use_largereps`) starts with `sp` its sparsity and `topk = sp / (1.5 d)`.

`use_largereps` (AutoAttack's L1 standard version): each run is three runs at eps 3 * eps, 2 * eps and
eps over ceil(0.3 * steps), ceil(0.3 * steps) and the remaining steps (below 3 steps: one run at
eps), each started from the previous one's point of highest objective projected onto the next ball;
the first from x0 plus a standard gaussian projected onto the 3 * eps ball. Only the last run's
successes count.

References:
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (sec. 3; Algorithm 1; sec. 3.2 for the schedule of eps;
    reference code: fra31/auto-attack `autoattack/autopgd_base.py`, `attack_single_run` and
    `decr_eps_pgd`).
"""

import math

import numpy as np
from keras import ops

from gradkit.attacks import _engine as engine
from gradkit.attacks import _geometry as geometry
from gradkit.attacks import _l1_box

REDUCE_STEP = 1.5  # the step size is divided by it at a checkpoint without a sparser best point
MIN_STEP = 10.0  # ... down to eps / MIN_STEP
SPARSER = 0.95  # a best point sparser than SPARSER times the last one resets the step size


def marks(steps):
    """The evaluations `[p, 2p, ...] <= steps` that are checkpoints, `p = max(floor(0.04 steps), 1)`."""
    period = max(int(0.04 * steps), 1)
    return list(range(period, steps + 1, period))


def stages(eps, steps):
    """`use_largereps`' runs `[(eps, steps)]`: 3, 2 and 1 times eps over ceil(30%), ceil(30%) and the
    rest of `steps`; below 3 steps one run at eps (the last run must have a step)."""
    if steps < 3:
        return [(eps, steps)]
    first = math.ceil(0.3 * steps)
    return [(3.0 * eps, first), (2.0 * eps, first), (eps, steps - 2 * first)]


def initial(x_start, x0, given):
    """Per-row `(topk, sp_old)` float32 `(n,)` of a run: (0.2, d) from a random start, else from the
    sparsity of the given start `x_start` (numpy)."""
    n, d = len(x0), x0[0].size
    if not given:
        return np.full(n, 0.2, np.float32), np.full(n, d, np.float32)
    sp = np.count_nonzero((x_start - x0).reshape(n, -1), axis=1).astype(np.float32)
    return sp / d / REDUCE_STEP, sp


def checkpoint(state, fixed, active):
    """The L1 rule on the rows `active`, applied where this step is a checkpoint (see the docstring)."""
    mark = ops.logical_and(state["mark"], active)
    x0 = fixed["x0"]
    sp = _l1_box.l0_norm(state["best_x"] - x0)
    sparser = ops.logical_and(mark, sp < SPARSER * state["sp_old"])
    eps = ops.cast(fixed["eps"], "float32")
    eta = ops.clip(ops.where(sparser, eps, state["eta"] / REDUCE_STEP), eps / MIN_STEP, eps)
    new = dict(state)
    new["eta"] = ops.where(mark, eta, state["eta"])
    new["topk"] = ops.where(mark, sp / math.prod(x0.shape[1:]) / REDUCE_STEP, state["topk"])
    new["sp_old"] = ops.where(mark, sp, state["sp_old"])
    new["x"], new["grad"] = engine.select_rows(sparser, (state["best_x"], state["best_grad"]),
                                               (state["x"], state["grad"]))  # fmt: skip
    return new


def propose(state, fixed, bounds, active):
    """`x_{k+1}` on the rows `active`: a sparse step of size eta, projected onto the ball and the box
    (no momentum: the L1 state has no previous iterate)."""
    x = state["x"]
    eta = ops.cast(engine.rows_mask(state["eta"], x), x.dtype)
    moved = geometry.l1_tensor(x + eta * _l1_box.sparse_direction(state["grad"], state["topk"]),
                               fixed["x0"], fixed["eps"], bounds)  # fmt: skip
    new = dict(state)
    new["x"] = engine.select_rows(active, moved, x)
    return new
