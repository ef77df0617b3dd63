"""The numpy reference of Auto-PGD (Croce & Hein 2020, Algorithm 1) over one `step` callable: the oracle
the device APGD of `gradkit.attacks.apgd` is checked against.

`apgd_core` knows nothing of Keras: it calls `step(x, labels, targets) -> (values, predictions, grad)`
on the still-attacked rows only and keeps the whole state in numpy. The algorithm, its checkpoints and
its start are those of `gradkit.attacks.apgd` (imported from there); the step is geometry's numpy rules.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (reference code: fra31/auto-attack,
    `autoattack/autopgd_base.py`).
"""

from types import SimpleNamespace

import numpy as np

from gradkit import _checks
from gradkit.attacks import geometry
from gradkit.attacks.apgd import checkpoints, sphere_start


def succeeded(predictions, labels, targets):
    """Success per sample `(n,)` bool: `predictions != labels`, or `predictions == targets` if targeted."""
    if targets is None:
        return np.asarray(predictions) != np.asarray(labels)
    return np.asarray(predictions) == np.asarray(targets)


def _evaluate(run, x_new, idx):
    """Calls `step` on the rows `idx` of `x_new`; records first successes and best points.

    Returns `(values (len(idx),) float64, grad float32 like x_new[idx])`.
    """
    targets = None if run.targets is None else run.targets[idx]
    values, predictions, grad = run.step(x_new[idx], run.labels[idx], targets)
    run.calls += 1
    values = np.asarray(values, dtype=np.float64).reshape(len(idx))
    grad = np.asarray(grad, dtype=np.float32).reshape(x_new[idx].shape)
    first = succeeded(predictions, run.labels[idx], targets).reshape(len(idx)) & ~run.success[idx]
    run.adv[idx[first]] = x_new[idx[first]]
    run.success[idx[first]] = True
    better = values > run.best_values[idx]
    run.best_x[idx[better]] = x_new[idx[better]]
    run.best_grad[idx[better]] = grad[better]
    run.best_values[idx[better]] = values[better]
    return values, grad


def _next_iterate(run, idx, alpha):
    """`x_{k+1}` of the rows `idx`: a projected step of size `eta` along `dir(g)`, then the momentum mix."""
    x, x0 = run.x[idx], run.x0[idx]
    eta = run.eta[idx].reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
    z = x + eta * geometry.direction(run.grad[idx], run.norm)
    z = geometry.project_and_clip(z, x0, run.eps, run.norm, run.clip_values)
    a = x.dtype.type(alpha)
    mixed = x + a * (z - x) + (1 - a) * (x - run.x_prev[idx])
    return geometry.project_and_clip(mixed, x0, run.eps, run.norm, run.clip_values)


def _checkpoint(run, idx, length):
    """Step-size rule at a checkpoint `length` iterations after the previous one, on rows `idx`."""
    cond1 = run.n_increases[idx] < run.rho * length
    cond2 = ~run.reduced[idx] & (run.best_at_check[idx] >= run.best_values[idx])
    halve = idx[cond1 | cond2]
    run.eta[halve] /= 2.0
    run.x[halve] = run.best_x[halve]
    run.grad[halve] = run.best_grad[halve]
    run.reduced[idx] = cond1 | cond2
    run.best_at_check[idx] = run.best_values[idx]
    run.n_increases[idx] = 0


def _init_run(step, x0, labels, targets, x_start, **options):
    """The state of one APGD run, every array full size `(n, ...)`, after `step` at the start point."""
    n = len(x0)
    run = SimpleNamespace(step=step, x0=x0, labels=labels, targets=targets, calls=0, **options)
    run.x, run.x_prev = x_start.copy(), x_start.copy()
    run.adv, run.best_x, run.best_grad = x_start.copy(), x_start.copy(), np.zeros_like(x_start)
    run.success, run.reduced = np.zeros(n, bool), np.ones(n, bool)
    run.best_values = np.full(n, -np.inf)
    run.eta = np.full(n, 2.0 * options["eps"])
    run.n_increases = np.zeros(n, np.int64)
    idx = np.arange(n)
    run.values, run.grad = _evaluate(run, run.x, idx)
    run.best_at_check = run.best_values.copy()
    return run


def apgd_core(
    step,
    x0,
    labels,
    *,
    eps,
    norm,
    steps,
    clip_values,
    rng,
    targets=None,
    x_init=None,
    rho=0.75,
    momentum=0.75,
    early_stop=True,
):
    """Auto-PGD (Croce & Hein 2020, Algorithm 1) on one input array, maximizing `step`'s objective.

    Args:
        step: callable `(x, labels, targets) -> (values, predictions, grad)`; `x` float32 `(m, ...)`
            (a subset of the rows), `values` float64 `(m,)` (the objective to maximize), `predictions`
            int `(m,)` (the decision at x), `grad` float32 like x (gradient of `sum(values)`).
        x0: clean inputs, float32 `(n, ...)`, inside `clip_values`.
        labels: int `(n,)`, the labels (untargeted success: the decision differs from them).
        eps: radius of the ball, >= 0. norm: `np.inf` or `2` (anything `_checks.check_norm` accepts).
        steps: iterations, >= 1; `step` is called `steps + 1` times at most (the start point included).
        clip_values: None or `(min, max)`. rng: a `np.random.Generator` (or a seed) for the start.
        targets: None or int `(n,)`; if given, success means the decision equals the target.
        x_init: optional start `(n, ...)` (projected onto the ball and box); defaults to `sphere_start`.
        rho: threshold of condition 1, in [0, 1]. Defaults to 0.75.
        momentum: alpha of the momentum step, in [0, 1]. Defaults to 0.75.
        early_stop: stop calling `step` on a row once it succeeded. Defaults to True.

    Returns:
        `(x_best_adv, success, best_values, n_grad_calls)`: float32 `(n, ...)`, the first successful
        iterate of each sample, else its iterate of highest objective; bool `(n,)`; float64 `(n,)`, the
        highest objective met at any evaluated iterate; int, the number of `step` calls.

    Raises:
        ValueError / TypeError: for a bad `eps`, `norm`, `steps`, `clip_values`, `rho` or `momentum`.
    """
    eps, norm, steps = _checks.check_eps(eps), _checks.check_norm(norm), _checks.check_steps(steps)
    clip_values = _checks.check_clip_values(clip_values)
    rho = _checks.check_real(rho, "rho", minimum=0, maximum=1)
    momentum = _checks.check_real(momentum, "momentum", minimum=0, maximum=1)
    x0 = np.asarray(x0, dtype=np.float32)
    labels = np.asarray(labels)
    targets = None if targets is None else np.asarray(targets)
    start = sphere_start(x0, eps, norm, np.random.default_rng(rng)) if x_init is None else x_init
    start = geometry.project_and_clip(np.asarray(start, np.float32), x0, eps, norm, clip_values)
    options = dict(eps=eps, norm=norm, clip_values=clip_values, rho=rho)
    run = _init_run(step, x0, labels, targets, start, **options)
    _iterate(run, steps, momentum, early_stop)
    run.adv[~run.success] = run.best_x[~run.success]
    return run.adv, run.success, run.best_values, run.calls


def _iterate(run, steps, momentum, early_stop):
    """The `steps` iterations of Algorithm 1 on the rows still attacked."""
    marks = set(checkpoints(steps)[1:])
    last_mark = 0
    for k in range(steps):
        idx = np.flatnonzero(~run.success) if early_stop else np.arange(len(run.x0))
        if len(idx) == 0:
            return
        x_new = _next_iterate(run, idx, 1.0 if k == 0 else momentum)
        run.x_prev[idx], run.x[idx] = run.x[idx], x_new
        values, run.grad[idx] = _evaluate(run, run.x, idx)
        run.n_increases[idx] += values > run.values[idx]
        run.values[idx] = values
        if k + 1 in marks:
            _checkpoint(run, idx, k + 1 - last_mark)
            last_mark = k + 1
