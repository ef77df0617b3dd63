"""The certified side of the study (`--certify ibp|crown-ibp|crown`): per model and eps, the test points that
no input of the eps-ball can misclassify, and the check that no attack broke one of them.

An attack shows that a point is not robust; the worst case over the study's attacks is therefore an
upper bound on robust accuracy. A certificate (bound propagation, `gradkit.evaluation.certified_points`;
a boosted model's weighted hard vote from its members' certificates) proves a point robust; the
certified fraction is a lower bound. Robust accuracy lies between the two, and a point both certified
and broken is a bug in the bound or in the attack's verdict: `check` finds such points per model and eps.

Per model the record keeps `record["certified"]`: per test point the largest study eps up to which it is
certified at every study eps (0.0: correct on the clean point only; None: misclassified). At eps 0 the
ball is the point itself, so "certified" is "correct"; at each larger eps only the points certified at
every smaller one are bounded again (a smaller ball lies in the larger one), so the rows never grow
with eps.

References:
    Gowal et al. (2018), "On the effectiveness of interval bound propagation for training verifiably
    robust models", https://arxiv.org/abs/1810.12715 (IBP).
    Zhang et al. (2018), "Efficient neural network robustness certification with general activation
    functions", NeurIPS, https://arxiv.org/abs/1811.00866 (CROWN).
    Zhang et al. (2020), "Towards stable and efficient training of verifiably robust neural networks",
    ICLR, https://arxiv.org/abs/1906.06316 (CROWN-IBP).
"""

import warnings

import numpy as np
from tqdm import tqdm

from gradkit import certificates
from gradkit.evaluation import certified_points
from gradkit.study import _outdir
from gradkit.study._attack import CLIP, WORST, row
from gradkit.study._config import MODELS, ConfigError
from gradkit.study._norms import VALUES

CERTIFIED = _outdir.CERTIFIED
SCOPE = {CERTIFIED: "all test points; certified at this eps by bound propagation (a lower bound)"}
CONTRADICTED = "certificate_contradicted"


def check_bounds(model, name, method):
    """Raises ConfigError, naming the model and the layer, when `method` cannot bound one of `model`'s
    networks (a layer without a bound rule): before any certificate is computed."""
    members, _ = certificates.member_weights(model)
    for member in members:
        empty = np.zeros((0, *member.input_shape[1:]), np.float32)
        try:
            certificates.certify(member, empty, [], 0.0, method=method)
        except ValueError as err:
            raise ConfigError(
                f"`certify`={method!r} cannot bound the model {name}: {err} The trained models are saved: "
                "rerun without it to finish the study."
            ) from None


def certify_at(model, name, data, eps, record, config, previous):
    """The "certified" row of `model` at `eps`, updating `record["certified"]` (module docstring).

    Args:
        model: the trained model (a Keras model or a boosted estimator); name: its name in the study.
        data: the `Dataset`; eps: float >= 0; previous: the study's eps below `eps` (0.0 if none), done.
        record: the model's per-sample record (`_attack.new_record`).
        config: the `StudyConfig` (`certify`, `norm`).

    Returns:
        dict: the row (`_attack.row`, scope "certified") of the points certified at `eps`, of all test points.
    """
    up_to = record.setdefault(CERTIFIED, [0.0 if c else None for c in record["clean"]])
    todo = np.array([i for i, c in enumerate(up_to) if c is not None and c >= previous], np.int64)
    if eps > 0 and len(todo):
        proved = certified_points(
            model,
            data.x_test[todo],
            data.y_test[todo],
            method=config.certify,
            eps=eps,
            norm=VALUES[config.norm],
            clip_values=CLIP,
            batch_size=None,
        )
        for i in todo[np.asarray(proved, bool)]:
            up_to[i] = eps
    k = sum(c is not None and c >= eps for c in up_to)
    return row(name, CERTIFIED, eps, k, len(up_to), norm=config.norm)


def certify_all(trained, config, data, state, progress):
    """Adds the missing (model, eps) "certified" rows to `state`, saving results.json after each."""
    done = {(r["model"], r["eps"]) for r in state["results"] if r["attack"] == CERTIFIED}
    todo = [(name, e) for name in MODELS for e in config.epsilons if (name, e) not in done]
    with tqdm(total=len(todo), desc=f"certify ({config.certify})", disable=not progress) as bar:
        for name, eps in todo:
            bar.set_postfix_str(f"{name} eps={eps:g}")
            previous = max((e for e in config.epsilons if e < eps), default=0.0)
            record = state["samples"][name]
            state["results"].append(certify_at(trained[name], name, data, eps, record, config, previous))
            _outdir.write_state(state, config.out)
            bar.update(1)


def check(samples, epsilons):
    """The check "certified <= worst case", per point, for every model with certificates and every eps.

    Args:
        samples: results.json's "samples" ({model: {"clean", "broken", "by", "certified"}}).
        epsilons: the study's epsilons.

    Returns:
        list of dicts {"model", "eps", "certified" (fraction), "worst_case" (fraction), "contradicted"
        (the indices of the test points certified at eps and broken by an attack at eps or below)}.
    """
    checks = []
    for name, record in samples.items():
        if CERTIFIED not in record:
            continue
        up_to, worst = record[CERTIFIED], record["broken"][WORST]
        for eps in epsilons:
            certified = np.array([c is not None and c >= eps for c in up_to], bool)
            robust = np.array([b is None or b > eps for b in worst], bool)
            checks.append(
                {
                    "model": name,
                    "eps": eps,
                    "certified": float(np.mean(certified)),
                    "worst_case": float(np.mean(robust)),
                    "contradicted": [int(i) for i in np.flatnonzero(certified & ~robust)],
                }
            )
    return checks


def contradiction_warnings(checks, method, log):
    """One warning per (model, eps) where a certified point was broken, naming the points; each is also
    raised as a RuntimeWarning and told to `log`."""
    found = []
    for c in checks:
        if not c["contradicted"]:
            continue
        shown = ", ".join(map(str, c["contradicted"][:10])) + (" ..." if len(c["contradicted"]) > 10 else "")
        message = (
            f"{len(c['contradicted'])} test points certified by {method} at eps {c['eps']:g} were broken by "
            f"an attack at eps {c['eps']:g} or below (indices {shown}): a certificate proves that no input "
            "of the ball changes the class, so the bound or the attack's verdict is wrong there. Report it "
            "with these points."
        )
        warning = {"model": c["model"], "attack": CERTIFIED, "eps": c["eps"], "name": CONTRADICTED}
        found.append({**warning, "message": message})
        warnings.warn(f"{c['model']}: {message}", RuntimeWarning, stacklevel=3)
        log(f"warning: {c['model']}: {message}")
    return found
