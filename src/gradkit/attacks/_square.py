"""The numerical core of the Square Attack (Andriushchenko et al. 2020), in numpy over one `forward` callable.

`square_core` is a random search: each sample keeps its best point and, once per iteration, tries one
change of a random square window of it (`_square_proposals`: Linf Algorithm 1, L2 Algorithm 3); the
change is kept when the objective of `forward` (the margin loss, to maximize) rises or the decision
succeeds. A sample that succeeded is no longer queried. The fraction `p` of pixels a window covers is
halved at iterations 10, 50, 200, 500, 1000, 2000, 4000, 6000 and 8000 of a 10000-query budget,
rescaled to `n_queries`.

Inputs are images `(n, h, w, c)` channels-last; `(n, h, w)` is read as one channel; flat `(n, d)` as a
`(h, w, 1)` image with `h` the largest divisor of `d` not above `sqrt(d)` (so `64 -> 8 x 8`, a prime
`d -> 1 x d`); more dimensions fold into channels. Windows larger than a side are cut to it.

References:
    Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
    adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049 (reference code:
    max-andr/square-attack `attack.py`, fra31/auto-attack `autoattack/square.py`).
"""

import numpy as np

from gradkit import _checks
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._apgd import succeeded
from gradkit.attacks._square_proposals import (
    l1_init,
    l1_proposal,
    l2_init,
    l2_proposal,
    linf_ends,
    linf_init,
    linf_proposal,
)

_PROPOSALS = {np.inf: (linf_init, linf_proposal), 2.0: (l2_init, l2_proposal), 1.0: (l1_init, l1_proposal)}

_HALVINGS = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)  # of a 10000-query budget


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


def square_core(forward, x0, labels, *, eps, norm, n_queries, p_init, clip_values, rng, targets=None,
                bind=None):  # fmt: skip
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
