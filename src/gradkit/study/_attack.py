"""The study's attacks: every attack at every eps, per sample, and the per-sample worst case.

For one model the study keeps, per attack, the smallest eps at which that attack fooled each test
point (`broken[attack]`: a list of float or None; 0.0 for a point misclassified without attack).
Epsilons run in increasing order and a point broken at eps e stays broken at every e' > e (the same
example lies in the larger ball), so at each eps an attack runs only on the points it has not broken
yet. "standard" (`gradkit.evaluate`'s AutoAttack-style cascade) runs last at each eps, only on the
points that no attack has broken: the worst case over every attack run.

Rows: `{"model", "attack", "eps", "accuracy"}` for each attack but "standard", plus "worst_case",
the fraction of points that no attack broke at that eps or below. Every attack goes through
`gradkit.evaluate` (Linf, `clip_values=(0, 1)`), which judges success on the model's real decision
(argmax, or the boosted model's weighted hard vote).

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
"""

import numpy as np

from gradkit.evaluation import evaluate

WORST = "worst_case"
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
        clip_values=CLIP,
        batch_size=batch_size,  # one compiled shape for every subset: the last batch is padded
        seed=config.seed,
        verbose=0,
        **_options(attack, config),
    )


def _summary(name, attack, eps, n, result):
    """What results.json keeps of one evaluation: its cost, per-attack figures and flags."""
    return {
        "model": name,
        "attack": attack,
        "eps": eps,
        "n_points": n,
        "robust_accuracy": result.robust_accuracy,
        "per_attack": result.per_attack,
        "flags": result.flags,
        "n_forwards": result.n_forwards,
        "n_gradients": result.n_gradients,
        "seconds": round(result.seconds, 3),
    }


def attack_at(model, name, data, eps, record, config, batch_size):
    """Runs every attack of `config` on `model` at `eps`, updating `record` in place.

    Args:
        model: the trained model (a Keras model or a boosted estimator).
        name: its name in the study.
        data: the `Dataset`; eps: float >= 0.
        record: its per-sample record (`new_record`), with every smaller eps already done.
        config: the `StudyConfig`; batch_size: rows per compiled call.

    Returns:
        `(rows, evaluations)`: the result rows at `eps` (one per attack but "standard", then
        "worst_case") and the evaluation summaries (cost, per-attack figures, flags).
    """
    broken, by, evaluations = record["broken"], record["by"], []
    for attack in sorted(config.attacks, key=lambda a: a == "standard"):  # "standard" last
        target = WORST if attack == "standard" else attack
        todo = _open(broken[target], eps)
        if eps == 0 or not len(todo):
            continue
        result = _run(model, data, todo, attack, eps, config, batch_size)
        for i, robust, how in zip(todo, result.robust, result.broken_by):
            if not robust:
                broken[target][i] = eps
                if by[i] is None:  # the first attack to break it, at the smallest eps (they ascend)
                    broken[WORST][i], by[i] = eps, attack if target != WORST else f"standard:{how}"
        evaluations.append(_summary(name, attack, eps, len(todo), result))
    names = [a for a in config.attacks if a != "standard"] + [WORST]
    rows = [{"model": name, "attack": a, "eps": eps, "accuracy": accuracy(broken[a], eps)} for a in names]
    return rows, evaluations


def accuracy(broken, eps):
    """The fraction of points not broken at `eps` or below (float in [0, 1])."""
    return float(np.mean([b is None or b > eps for b in broken]))
