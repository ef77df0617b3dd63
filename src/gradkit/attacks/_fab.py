"""`gradkit.fab`: the Fast Adaptive Boundary attack (FAB, and FAB-T as in AutoAttack), Linf, L2 and L1."""

import math

import numpy as np

from gradkit import _checks
from gradkit.attacks._fab_device import run_rows
from gradkit.attacks._session import Session

RESTART_RADIUS = {np.inf: 0.3, 2.0: 1.0, 1.0: 5.0}  # AutoAttack's default eps, for [0, 1] inputs
_STACKED_VALUES = 1 << 24  # input values of FAB-T's targets run together (64 MB per float32 array)


def check_norm(norm):
    """`np.inf`, 2.0 or 1.0 from the spellings gradkit accepts (1, "l1" and "1" for L1)."""
    key = norm.lower() if isinstance(norm, str) else norm
    if key in ("l1", "1") or (_checks.is_real(key) and not isinstance(key, bool) and key == 1):
        return 1.0
    try:
        return _checks.check_norm(norm)
    except ValueError:
        raise ValueError(
            f'`norm` must be np.inf (or "inf", "linf"), 2 (or "l2") or 1 (or "l1"). Received: norm={norm!r}'
        ) from None


def lp_distance(a, b, norm):
    """Per-sample `||a - b||_p` in float64, `(n,)`."""
    delta = (a.astype(np.float64) - b.astype(np.float64)).reshape(len(a), math.prod(a.shape[1:]))
    if norm == np.inf:
        return np.abs(delta).max(axis=1, initial=0.0)
    return np.linalg.norm(delta, ord=norm, axis=1)


def _check(norm, eps, targeted, n_target_classes, steps, n_restarts, alpha_max, eta, beta, seed):
    return dict(
        norm=check_norm(norm),
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


def _check_classes(targeted, n_target_classes, n_classes):
    if not targeted:
        return
    if n_classes < 3:
        raise ValueError(
            f"`targeted`=True (FAB-T) needs at least 3 classes (with 2 the only target is the untargeted "
            f"attack); the model has {n_classes}. Use targeted=False."
        )
    if n_target_classes > n_classes - 1:
        raise ValueError(
            f"`n_target_classes` must be <= {n_classes - 1} (the classes other than the label) for a model "
            f"of {n_classes} classes. Received: n_target_classes={n_target_classes}"
        )


def _random_start(x0, radius, norm, bounds, rng):
    """AutoAttack's restart: x0 plus a random direction of norm radius / 2 (Linf uniform, else gaussian)."""
    t = rng.uniform(-1, 1, x0.shape) if norm == np.inf else rng.standard_normal(x0.shape)
    scale = lp_distance(t, np.zeros_like(t), norm).reshape((-1,) + (1,) * (x0.ndim - 1))
    start = x0 + (0.5 * radius.reshape(scale.shape) * t / np.maximum(scale, 1e-12)).astype(np.float32)
    return start if bounds is None else np.clip(start, bounds[0], bounds[1]).astype(np.float32)


def _groups(ranks, n, features):
    """The target columns run together (one run over their stacked rows; rows are independent, so the
    same as one run per target with fewer calls), each group at most 2**24 input values; `[[None]]`
    untargeted."""
    if ranks is None:
        return [[None]]
    size = max(1, _STACKED_VALUES // max(n * features, 1))
    columns = list(range(ranks.shape[1]))
    return [columns[i : i + size] for i in range(0, len(columns), size)]


def fab_run(model, x, y=None, *, norm=np.inf, eps=None, targeted=False, n_target_classes=9, steps=10,
            n_restarts=1, alpha_max=0.1, eta=1.05, beta=0.9, clip_values=None, batch_size=None, seed=0,
            output=None, objective="loss_sum"):  # fmt: skip
    """`gradkit.fab` returning `(x_adv, norms, success, session)`: norms float64 `(n,)` of the smallest
    perturbation found (0 where the clean point is misclassified, inf where none was found); success
    bool `(n,)`: adversarial, and inside the eps-ball when `eps` is given."""
    args = _check(norm, eps, targeted, n_target_classes, steps, n_restarts, alpha_max, eta, beta, seed)
    session = Session(model, x, y, eps=0.0, norm=np.inf, clip_values=clip_values, batch_size=batch_size,
                      output=output, loss="ce", objective=objective)  # fmt: skip
    _check_classes(args["targeted"], args["n_target_classes"], session.n_classes)
    options = dict(batch_size=_checks.check_batch_size(batch_size), output=output, objective=objective)
    x0, norm, eps = session.x0, args["norm"], args["eps"]
    correct = session.predict(x0) == session.labels
    best, best_norm = x0.copy(), np.where(correct, np.inf, 0.0)
    ranks = session.top_classes(args["n_target_classes"]) if args["targeted"] else None
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
                start = _random_start(start, radius, norm, session.clip_values, rng)
            adv, size = run_rows(session, model, rows, start, targets, args, options)
            adv, size = adv.reshape((len(group), len(idx)) + x0.shape[1:]), size.reshape(len(group), -1)
            first, cols = size.argmin(axis=0), np.arange(len(idx))  # each point's closest target
            adv, size = adv[first, cols], size[first, cols]
            better = size < best_norm[idx]
            best[idx[better]], best_norm[idx[better]] = adv[better], size[better]
    found = np.isfinite(best_norm) & correct
    norms = np.where(correct, np.inf, 0.0)
    norms[found] = lp_distance(best[found], x0[found], norm)
    success = ~correct | (found if eps is None else found & (norms <= eps))
    x_adv = np.where((success & correct).reshape((-1,) + (1,) * (x0.ndim - 1)), best, x0)
    return x_adv.astype(np.float32), norms, success, session


def fab(model, x, y=None, *, norm=np.inf, eps=None, targeted=False, n_target_classes=9, steps=10,
        n_restarts=1, alpha_max=0.1, eta=1.05, beta=0.9, clip_values=None, batch_size=None, seed=0,
        output=None, objective="loss_sum"):  # fmt: skip
    """Fast Adaptive Boundary attack (Croce & Hein 2020): per sample, the smallest adversarial example
    it finds, in the Linf, L2 or L1 norm; FAB-T with `targeted=True`.

    Each step linearizes the differences of logits `f_j - f_y` at the iterate (their Jacobian rows, one
    gradient per class), picks the class whose linearized boundary is closest, projects both the iterate
    and the clean input onto that hyperplane inside the box `clip_values` (the exact minimal-norm
    projection), and moves to the mix `(1 - a)(x + eta d_x) + a (x0 + eta d_0)`, `a = min(||d_x|| /
    (||d_x|| + ||d_0||), alpha_max)`; where the new iterate is adversarial it is recorded if closer than
    the best so far, and the iterate steps back to `x0 + beta (x' - x0)` (Algorithm 1). Success is
    judged at every iterate on the model's real decision rule (argmax; an ensemble's or boosted
    model's weighted hard vote). The state stays on the device between steps; each step is one
    compiled call with `C` gradient rows per sample (1 for FAB-T) and one forward pass.

    The first run starts at `x`; each further restart from a random point at half the norm of the best
    example found so far (at most `eps`, or AutoAttack's 0.3 / 1 / 5 for Linf / L2 / L1 without it).
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
        n_target_classes: targets of FAB-T, int in [1, C - 1]. Defaults to 9 (AutoAttack's value).
        steps: iterations per run, int >= 1. Defaults to 10 (`gradkit.evaluate`'s "fab-t" runs 100,
            AutoAttack's value).
        n_restarts: runs per target (the first from `x`), int >= 1. Defaults to 1.
        alpha_max: the largest weight of the step from `x0`, in [0, 1]. Defaults to 0.1.
        eta: overshoot of the projections, > 0. Defaults to 1.05.
        beta: the backward step towards `x0` after a success, in [0, 1]. Defaults to 0.9.
        clip_values: None or `(min, max)`, the valid input range (the box of the projections).
        batch_size: samples per compiled call (each takes `C` rows untargeted, 1 targeted). Defaults to
            None: min(256, next power of two >= n), at most 2**22 input values per call.
        seed: None or int >= 0 seeding the restarts' random starts (numpy). Defaults to 0.
        output: name or index of the attacked output of a multi-output model.
        objective: how an ensemble's members are combined into the differences of logits, as in
            `gradkit.bim` ("loss_sum": the weighted sum of the members' differences; "vote_margin": the
            difference of the smoothed weighted vote). Defaults to "loss_sum".

    Returns:
        float32 `(n, *input_shape)`: per sample the smallest adversarial example found, or the clean `x`
        where none was found (with `eps`: where none lies inside the eps-ball); a clean point already
        misclassified is returned as is. In `clip_values`.

    Raises:
        ValueError: a norm other than inf, 2, 1; eps < 0; steps, n_restarts or n_target_classes < 1;
            alpha_max, beta outside [0, 1]; eta <= 0; FAB-T on fewer than 3 classes or with
            n_target_classes > C - 1; labels out of range; `x` outside `clip_values`. Before any attack
            step.
        TypeError: several inputs, non-integer counts, a non-bool `targeted`, a bad `model`.

    References:
        Croce & Hein (2020), "Minimally distorted adversarial examples with a fast adaptive boundary
        attack", ICML, https://arxiv.org/abs/1907.02044 (Algorithm 1, Section 3).
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (FAB-T).

    Example:
        >>> x_adv = gradkit.fab(model, x, y, norm=2, clip_values=(0, 1))  # doctest: +SKIP
    """
    return fab_run(
        model, x, y, norm=norm, eps=eps, targeted=targeted, n_target_classes=n_target_classes, steps=steps,
        n_restarts=n_restarts, alpha_max=alpha_max, eta=eta, beta=beta, clip_values=clip_values,
        batch_size=batch_size, seed=seed, output=output, objective=objective,
    )[0]  # fmt: skip
