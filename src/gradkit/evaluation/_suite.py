"""`gradkit.evaluate`: the cascade of attacks, each on the points still robust, and its worst case."""

import time

import keras
import numpy as np
from tqdm.auto import tqdm

from gradkit import attacks as registry
from gradkit.errors import DisconnectedGradientError
from gradkit.evaluation import _plan, _state
from gradkit.evaluation._result import from_state
from gradkit.evaluation._stats import points_digest
from gradkit.gradients import as_ensemble, member_gradient_norms, predict_batched

_PROBE = 32  # rows predicted twice to detect a randomized forward pass


def evaluate(
    model,
    x,
    y,
    *,
    eps,
    norm=np.inf,
    attacks="standard",
    clip_values=None,
    batch_size=None,
    seed=0,
    n_queries=5000,
    steps=100,
    state_path=None,
    verbose=1,
):
    """Robust accuracy under a cascade of attacks: AutoAttack's standard version by default.

    Each attack runs only on the points every earlier attack left correctly classified; a point counts as
    robust when no attack fooled the model's real decision rule (argmax, or the weighted hard vote of an
    ensemble or boosted model), so the result is the per-sample worst case over all attacks.
    "standard" runs APGD-CE, APGD-T (targeted DLR, top-9 wrong classes) and Square (`n_queries`);
    on an ensemble or boosted model each gradient attack runs once with the objective "loss_sum" and
    once with "vote_margin" ("apgd-ce/loss_sum", "apgd-ce/vote_margin", ...). A model of fewer than 4
    classes skips APGD-T (its loss needs 4).

    The threat model follows `norm`:
    | norm | "standard" runs | settings (AutoAttack's for that norm) |
    |---|---|---|
    | Linf, L2 | APGD-CE, APGD-T, Square | APGD-CE 1 restart; APGD-T 9 targets |
    | L1 | APGD-CE, APGD-T, Square | APGD-L1 with `use_largereps`; APGD-CE 5 restarts; APGD-T 5 targets |

    Args:
        model: a Keras classifier, a `gradkit.WeightedEnsemble` or a fitted boosting estimator.
        x: float array `(n, ...)`, one input array.
        y: int class ids `(n,)` (or one-hot `(n, C)`) in [0, C).
        eps: float >= 0, the perturbation budget in `norm`.
        norm: `np.inf` (or "inf", "linf"), 2 (or "l2") or 1 (or "l1"). Defaults to `np.inf`.
        attacks: "standard" (default), one attack name, or a list of names of `gradkit.attacks.NAMES`
            ("apgd-ce", "apgd-dlr", "apgd-t", "fab-t", "square", "pgd", "bim", "fgsm"), each optionally
            "name/objective" with an ensemble objective ("loss_sum", "logit_mean", "prob_mean",
            "vote_margin"), and callables `fn(model, x, y, eps=eps) -> x_adv` (judged here with
            `gradkit.attacks.decide`).
        clip_values: `(min, max)` input range, or None (default) for none.
        batch_size: rows per compiled call and per progress step, or None (default: all at once).
        seed: int >= 0 or None; the random starts and searches. Defaults to 0. The points are cut into
            blocks of `batch_size` consecutive rows and an attack call on block j's remaining points
            uses `seed + j`, so a shard of whole blocks (`gradkit evaluate --shard`) gets the same
            per-point results as the whole run.
        n_queries: int >= 1, Square's query budget. Defaults to 5000.
        steps: int >= 1, iterations of APGD, FAB-T, PGD and BIM. Defaults to 100. ("fab-t" is
            AutoAttack's FAB-T: the top 9 target classes, 1 restart, on the points still robust.)
        state_path: None (default) or a JSON file path: after each finished attack the state is saved
            there atomically (arrays in `<stem>.<k>.npz` next to it); a rerun with the same arguments
            and the same model (its weights' SHA-256 is part of the state) continues after the last
            finished attack.
        verbose: 0 silent; >= 1 (default) a tqdm progress bar per attack.

    Returns:
        `Evaluation`: accuracies, the per-sample `robust`, `broken_by` and `x_adv`, the per-attack
        records, costs and attack-failure `flags`.

    Raises:
        ValueError: an unknown attack name or objective, eps < 0, n_queries < 1, steps < 1, labels out
            of range, `x` outside `clip_values`, an attack the model has too few classes for, or a
            `state_path` that holds another evaluation (other arguments, another model or weights).
            All are raised before any attack runs and before anything is written.
        TypeError: arguments of the wrong type.

    References:
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (the L1 standard version: sec. 4)
    """
    x, labels, classes = _plan.check_data(model, x, y)
    config = _plan.check_config(
        model,
        classes,
        attacks=attacks,
        eps=eps,
        norm=norm,
        clip_values=clip_values,
        batch_size=batch_size,
        seed=seed,
        n_queries=n_queries,
        steps=steps,
        verbose=verbose,
    )
    _plan.check_range(x, config.clip_values)
    state_path = _state.check_path(state_path)
    fp = _state.fingerprint(model, x, labels, config) if state_path else None
    state = _state.load(state_path, fp) if state_path else None
    start = time.perf_counter()
    if state is None:
        state = clean(model, x, labels, config)
    cascade(model, x, labels, config, state, state_path=state_path, fp=fp, start=start)
    shares = shares_of(model, x, labels, config)
    result = from_state(state, config, weights=weights(model), shares=shares, backend=keras.backend.backend())
    result.points = points_digest(x, labels)
    return result


def cascade(model, x, labels, config, state, *, state_path=None, fp=None, first_block=0, start=None):
    """Runs every unfinished attack of `config` on `state` (in place), saving it after each attack when
    `state_path` is set; `first_block` numbers the first block of `x` (see `_run`); `start`: the
    `time.perf_counter()` its time counts from (default: now)."""
    start, seconds = start or time.perf_counter(), state.seconds
    for entry in config.entries:
        if entry.name in state.finished:
            continue
        _run(model, x, labels, entry, config, state, first_block)
        state.seconds = seconds + time.perf_counter() - start
        if state_path:
            _state.save(state_path, fp, state)
    state.seconds = seconds + time.perf_counter() - start
    return state


def weights(model):
    """The ensemble weights of an ensemble or boosted model (floats), else ()."""
    return tuple(float(w) for w in as_ensemble(model).weights) if registry.is_ensemble(model) else ()


def shares_of(model, x, labels, config):
    """alpha_k * ||grad_x CE_k||_2 `(K, n)` of an ensemble's members at the clean points, else None."""
    return member_gradient_norms(model, x, labels, config.batch_size) if registry.is_ensemble(model) else None


def _randomness(model, x, batch_size):
    """Max |difference| between two predictions of the first rows, over the members; 0.0 if none."""
    rows, worst = x[:_PROBE], 0.0
    for member in as_ensemble(model).models:
        first, second = (predict_batched(member, rows, batch_size or 256) for _ in range(2))
        for a, b in zip(keras.tree.flatten(first), keras.tree.flatten(second)):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
                worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


def clean(model, x, labels, config, prediction=None):
    """The state before any attack: clean decisions (`prediction`, computed if None) and the randomness
    probe."""
    if prediction is None:
        prediction = registry.decide(model, x, config.batch_size)
    robust = np.asarray(prediction) == labels
    probe = 2 * min(len(x), _PROBE) * len(as_ensemble(model).models)
    return _state.State(
        robust=robust,
        broken_by=[None if r else "clean" for r in robust],
        x_adv=x.copy(),
        zero_gradient=np.zeros(len(x), bool),
        clean_accuracy=float(robust.mean()),
        randomized=_randomness(model, x, config.batch_size),
        n_forwards=len(x) + probe,
    )


def _attack(model, x_rows, y_rows, entry, config, seed, state):
    """Runs `entry` on some rows; returns `(x_adv, success (m,) bool, zero_gradient (m,) bool or None)`."""
    if entry.fn is not None:
        x_adv = _plan.check_adversarial(
            entry, x_rows, entry.fn(model, x_rows, y_rows, eps=config.eps), config
        )
        state.n_forwards += len(x_rows)
        return x_adv, registry.decide(model, x_adv, config.batch_size) != y_rows, None
    result = registry.run_attack(
        entry.attack, model, x_rows, y_rows, eps=config.eps, norm=config.norm, clip_values=config.clip_values,
        batch_size=config.batch_size, seed=seed, **_plan.options(entry, config),
    )  # fmt: skip
    state.n_forwards += int(result.n_forwards)
    state.n_gradients += int(result.n_gradients)
    if result.from_probabilities and entry.name not in state.from_probabilities:
        state.from_probabilities.append(entry.name)
    x_adv, hit = np.asarray(result.x_adv), np.asarray(result.success, bool)
    return x_adv, _confirm(model, x_adv, y_rows, hit, config, state), result.zero_gradient


def _confirm(model, x_adv, y_rows, hit, config, state):
    """`hit` (m,) bool where `decide` agrees that `x_adv` fools the model; counts the disagreements."""
    confirmed = hit.copy()
    if hit.any():
        confirmed[hit] = registry.decide(model, x_adv[hit], config.batch_size) != y_rows[hit]
        state.n_forwards += int(hit.sum())
        state.unconfirmed += int(hit.sum() - confirmed.sum())
    return confirmed


def _blocks(todo, step, first_block):
    """`(j, rows)`: the rows of `todo` in each block `[j * step, (j + 1) * step)`, j from `first_block`."""
    blocks = todo // step
    for j in np.unique(blocks):
        yield first_block + int(j), todo[blocks == j]


def _run(model, x, labels, entry, config, state, first_block=0):
    """Runs `entry` on the points still robust, block by block of `batch_size` rows (block j, counted from
    `first_block`, seeded with `seed + j`), and records it in `state`."""
    todo = np.flatnonzero(state.robust)
    before, t0, broken, disconnected = (state.n_forwards, state.n_gradients), time.perf_counter(), 0, False
    step = config.batch_size or max(len(state.robust), 1)
    with tqdm(total=len(todo), desc=entry.name, disable=config.verbose == 0, leave=True) as bar:
        for k, rows in _blocks(todo, step, first_block):
            seed = None if config.seed is None else config.seed + k
            try:
                x_adv, hit, zero = _attack(model, x[rows], labels[rows], entry, config, seed, state)
            except DisconnectedGradientError:  # a gradient attack on a non-differentiable model: flagged
                x_adv, hit, zero = x[rows], np.zeros(len(rows), bool), np.ones(len(rows), bool)
                disconnected = True
            state.x_adv[rows] = x_adv
            state.robust[rows[hit]] = False
            for i in rows[hit]:
                state.broken_by[i] = entry.name
            if zero is not None:
                state.zero_gradient[rows] |= np.asarray(zero, bool)
            broken += int(hit.sum())
            bar.update(len(rows))
            bar.set_postfix(robust=f"{state.robust.mean():.4f}")
    state.finished.append(entry.name)
    state.per_attack[entry.name] = {
        "accuracy": 1.0 - broken / len(todo) if len(todo) else None,
        "robust_accuracy": float(state.robust.mean()),
        "n_points": len(todo),
        "n_broken": broken,
        "n_forwards": state.n_forwards - before[0],
        "n_gradients": state.n_gradients - before[1],
        "seconds": time.perf_counter() - t0,
        "no_gradient": disconnected,
    }
