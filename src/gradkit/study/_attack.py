"""The study's attacks: every attack at every eps, per sample, and the per-sample worst case (`attack_at`),
and the result rows with their 95% Wilson score intervals, of three scopes (`row`).

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
"""

import numpy as np

from gradkit.attacks import MIN_NORM_NAMES
from gradkit.evaluation import evaluate, min_norm, wilson_interval
from gradkit.study._norms import VALUES
from gradkit.study._outdir import CERTIFIED  # the rows of `gradkit study --certify` (`_certified`)

WORST = "worst_case"
MIN_NORM = MIN_NORM_NAMES  # minimum-norm attacks: one run per model gives every eps
SCOPES = {
    "worst_case": "all test points; broken by any attack at this eps or below",
    "cumulative": "all test points; broken by this attack at this eps or below",
    "remaining": "the points no other attack broke at this eps or below",
}
CLIP = (0.0, 1.0)


def new_record(clean_correct, attacks):
    """The per-sample record of a model before any attack: `{"clean": [bool], "broken": {attack: [...]}}`."""
    clean = [bool(c) for c in clean_correct]
    start = [None if c else 0.0 for c in clean]
    broken = {a: list(start) for a in (*attacks, WORST) if a != "standard"}
    return {"clean": clean, "broken": broken, "by": [None if c else "clean" for c in clean]}


def _options(attack, config):
    """`gradkit.evaluate`'s arguments for one study attack."""
    if attack == "standard":
        return {"attacks": "standard", "steps": config.apgd_steps, "n_queries": config.square_queries}
    steps = config.pgd_steps if attack == "pgd" else config.apgd_steps
    return {"attacks": [attack], "steps": steps, "n_queries": config.square_queries}


def _open(broken, eps):
    """Indices of the points not broken at eps or below."""
    return np.array([i for i, b in enumerate(broken) if b is None or b > eps], dtype=np.int64)


def _run(model, data, rows, attack, eps, config, batch_size):
    """`gradkit.evaluate` of `attack` on the test points `rows`; the `Evaluation`."""
    return evaluate(
        model,
        data.x_test[rows],
        data.y_test[rows],
        eps=eps,
        norm=VALUES[config.norm],
        clip_values=CLIP,
        batch_size=batch_size,  # one compiled shape for every subset: the last batch is padded
        seed=config.seed,
        verbose=0,
        **_options(attack, config),
    )


def _summary(name, attack, eps, n, result):
    """What results.json keeps of one evaluation: its cost, per-attack figures and flags. Every
    "accuracy" is a fraction of the "n_points" beside it (per attack: the points that attack ran on)."""
    per_attack = {
        key: {k: v for k, v in record.items() if k != "robust_accuracy"}
        for key, record in result.per_attack.items()
    }
    return {
        "model": name,
        "attack": attack,
        "eps": eps,
        "n_points": n,
        "accuracy": result.robust_accuracy,
        "interval": list(result.interval),
        "per_attack": per_attack,
        "flags": result.flags,
        "n_forwards": result.n_forwards,
        "n_gradients": result.n_gradients,
        "seconds": round(result.seconds, 3),
    }


def min_norms(model, data, record, config, batch_size, attack):
    """The per-point minimal norms (in `config.norm`) of one run of the minimum-norm `attack` ("fmn", "fab"
    or "ddn") on every test point (None: not broken), computed once per model and kept in
    `record["min_norm"][attack]`."""
    kept_norms = record.setdefault("min_norm", {})
    if attack not in kept_norms:
        result = min_norm(
            model,
            data.x_test,
            data.y_test,
            norm=VALUES[config.norm],
            attacks=(attack,),
            steps=config.apgd_steps,
            clip_values=CLIP,
            batch_size=batch_size,
        )
        kept_norms[attack] = [None if np.isinf(v) else float(v) for v in result.norms]
    return kept_norms[attack]


def _mark(record, target, attack, eps, rows, how=None):
    """Records the points `rows` as broken by `attack` at `eps` (and the worst case where first)."""
    broken, by = record["broken"], record["by"]
    for i in rows:
        broken[target][i] = eps
        if by[i] is None:  # the first attack to break it, at the smallest eps (they ascend)
            broken[WORST][i], by[i] = eps, attack if target != WORST else f"standard:{how}"


def attack_at(model, name, data, eps, record, config, batch_size):
    """Runs every attack of `config` on `model` at `eps`, updating `record` in place.

    For one model the study keeps, per attack, the smallest eps at which that attack fooled each test
    point (`broken[attack]`: a list of float or None; 0.0 for a point misclassified without attack).
    Epsilons run in increasing order and a point broken at eps e stays broken at every e' > e (the same
    example lies in the larger ball), so at each eps an attack runs only on the points it has not
    broken yet. "standard" (`gradkit.evaluate`'s AutoAttack-style cascade) runs last at each eps, only
    on the points that no attack has broken: the worst case over every attack run.

    Every attack runs at the study's norm (`config.norm`: "linf", "l2" or "l1"; eps is a radius in it).
    Every attack but the minimum-norm ones ("fmn", "fab", "ddn") goes through `gradkit.evaluate`
    (`clip_values=(0, 1)`; "standard" is AutoAttack's standard version for that norm), which judges
    success on the model's real decision (argmax, or the boosted model's weighted hard vote). "fmn",
    "fab" and "ddn" (L2 only) run `gradkit.min_norm` once per model (at its first eps > 0) on every test
    point; the per-point minimal norms (None: not broken) stay in the record
    (`record["min_norm"]["fmn"]`, samples.csv's `<model>_fmn_norm`; the same for "fab" and "ddn") and
    break each point at every eps >= its norm.

    Args:
        model: the trained model (a Keras model or a boosted estimator).
        name: its name in the study.
        data: the `Dataset`; eps: float >= 0.
        record: its per-sample record (`new_record`), with every smaller eps already done.
        config: the `StudyConfig`; batch_size: rows per compiled call.

    Returns:
        `(rows, evaluations)`: the result rows at `eps` ("worst_case", one per attack but "standard",
        then "standard" where it ran; see `row`) and the evaluation summaries (cost, per-attack figures,
        flags).
    """
    broken, evaluations, standard = record["broken"], [], None
    for attack in sorted(config.attacks, key=lambda a: a == "standard"):  # "standard" last
        target = WORST if attack == "standard" else attack
        todo = _open(broken[target], eps)
        if eps == 0 or not len(todo):
            continue
        if attack in MIN_NORM:
            norms = min_norms(model, data, record, config, batch_size, attack)
            _mark(record, target, attack, eps, [i for i in todo if norms[i] is not None and norms[i] <= eps])
            continue
        result = _run(model, data, todo, attack, eps, config, batch_size)
        for i, robust, how in zip(todo, result.robust, result.broken_by):
            if not robust:
                _mark(record, target, attack, eps, [i], how)
        evaluations.append(_summary(name, attack, eps, len(todo), result))
        if attack == "standard":
            standard = int(np.sum(result.robust)), len(todo)
    names = [WORST] + [a for a in config.attacks if a != "standard"]
    rows = [row(name, a, eps, *kept(broken[a], eps), norm=config.norm) for a in names]
    if standard is not None:
        rows.append(row(name, "standard", eps, *standard, norm=config.norm))
    return rows, evaluations


def work(config, eps, n_members=1, n_classes=10):
    """The work of attacking one model at `eps`, in gradient evaluations per point (a forward pass
    counts 1/3): what the progress bar weighs each (model, eps) step by. 0 at eps 0 (nothing runs);
    "standard" counts APGD-CE, APGD-T (`min(9, n_classes - 1)` targets; none below 4 classes), FAB-T
    (as many targets; none below 3) and Square, twice the gradient attacks on a boosted model (two
    objectives); every member of an ensemble is one network to run; at L1 "standard" is AutoAttack's L1
    version (APGD-CE 5 restarts, APGD-T 5 targets). A minimum-norm attack runs once over every eps (FAB
    untargeted attacks each point towards all `n_classes` classes at once)."""
    if eps == 0:
        return 0.0
    l1 = config.norm == "l1"
    targets = config.apgd_steps * min(9, n_classes - 1)
    apgd_t = config.apgd_steps * min(5 if l1 else 9, n_classes - 1) * (n_classes >= 4)  # DLR needs 4
    fab_t = targets * (n_classes >= 3)  # FAB-T needs 3
    runs = max(1, sum(e > 0 for e in config.epsilons))
    costs = {
        "fgsm": 1,
        "pgd": config.pgd_steps,
        "apgd-ce": config.apgd_steps,
        "apgd-t": targets * (n_classes >= 4),
        "square": config.square_queries / 3,
        "fmn": config.apgd_steps / runs,
        "fab": config.apgd_steps * n_classes / runs,
        "ddn": config.apgd_steps / runs,
    }
    objectives = 2 if n_members > 1 else 1
    standard = (5 if l1 else 1) * config.apgd_steps + apgd_t + fab_t
    costs["standard"] = objectives * standard + costs["square"]
    return float(n_members * sum(costs[a] for a in config.attacks))


def kept(broken, eps):
    """`(k, n)`: the points not broken at `eps` or below, and all points."""
    return sum(b is None or b > eps for b in broken), len(broken)


def row(model, attack, eps, k, n, norm="linf"):
    """One result row: accuracy `k / n` with its 95% Wilson interval, n, the norm of `eps` and the scope.

    `{"model", "attack", "norm", "eps", "accuracy", "n_points", "ci_low", "ci_high", "scope"}`, the
    accuracy `k / n_points` with its 95% Wilson score interval `[ci_low, ci_high]`, of three scopes:

    - "worst_case" (attack "worst_case"): of all test points, the fraction that no attack broke at that
      eps or below (exact: an example in a smaller ball lies in every larger one);
    - "cumulative" (each attack but "standard"): of all test points, the fraction that attack did not
      break at that eps *or any smaller one* (it attacks only the points it has not broken yet, so the
      row means "no run of this attack up to this eps broke it", a lower bound on that attack's
      accuracy at this eps alone);
    - "remaining" ("standard", eps > 0): the accuracy of `gradkit.evaluate`'s cascade on the
      `n_points` points it ran on (those no attack broke at that eps or below), the strong evaluation's
      own figure on what the cheaper attacks left;
    - "certified" (attack "certified", `--certify`): of all test points, the fraction certified at that
      eps (`_certified`), a lower bound beside the worst case.
    """
    low, high = wilson_interval(int(k), int(n))
    scope = {WORST: WORST, "standard": "remaining", CERTIFIED: CERTIFIED}.get(attack, "cumulative")
    return {
        "model": model,
        "attack": attack,
        "norm": norm,
        "eps": eps,
        "accuracy": k / n,
        "n_points": n,
        "ci_low": low,
        "ci_high": high,
        "scope": scope,
    }
