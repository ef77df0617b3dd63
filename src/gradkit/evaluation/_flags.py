"""Signs that an attack failed, so that a robust accuracy may be an overestimate.

Each flag is a dict `{"name", "message", "reference"}`, computed from what the run already measured (no
extra attack): clean accuracy near chance, zero input gradients, log-probabilities standing in for
logits, a randomized forward pass, a later attack breaking points an iterative gradient attack could
not, an ensemble that is one network; and, over several evaluations (`check_curve`), robust accuracy
rising with eps or an unbounded eps that leaves points robust. The flags of eps and input units are in
`_scale`.

References:
    Carlini, Athalye, Papernot, Brendel, Rauber, Tsipras, Goodfellow, Madry & Kurakin (2019), "On
    evaluating adversarial robustness", https://arxiv.org/abs/1902.06705
    Pintor, Demetrio, Sotgiu, Melis, Demontis & Biggio (2022), "Indicators of attack failure: debugging
    and improving optimization of adversarial examples", NeurIPS, https://arxiv.org/abs/2106.09947
    Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security: circumventing
    defenses to adversarial examples", ICML, https://arxiv.org/abs/1802.00420
    Tramer, Carlini, Brendel & Madry (2020), "On adaptive attacks to adversarial example defenses",
    NeurIPS, https://arxiv.org/abs/2002.08347
"""

import numpy as np

from gradkit import _checks
from gradkit.attacks import TABLE

CARLINI = "Carlini et al. (2019), On Evaluating Adversarial Robustness, https://arxiv.org/abs/1902.06705"
PINTOR = "Pintor et al. (2022), Indicators of Attack Failure, NeurIPS, https://arxiv.org/abs/2106.09947"
ATHALYE = (
    "Athalye, Carlini & Wagner (2018), Obfuscated Gradients Give a False Sense of Security, ICML, "
    "https://arxiv.org/abs/1802.00420"
)
TRAMER = (
    "Tramer, Carlini, Brendel & Madry (2020), On Adaptive Attacks to Adversarial Example Defenses, "
    "NeurIPS, https://arxiv.org/abs/2002.08347"
)
_ITERATIVE = tuple(name for name, attack in TABLE.items() if attack.ascent)  # APGD, PGD, BIM
MASKING_SHARE = 0.01  # Square must break more than this share of the points it attacks to flag masking
MASKING_MIN_POINTS = 2  # ... and at least this many
NEAR_CHANCE = 0.25  # clean accuracy under this share of the way from chance to 1 is flagged


def flag(name, message, reference):
    """One flag: `{"name": str, "message": str, "reference": str}`."""
    return {"name": name, "message": message, "reference": reference}


def near_chance(accuracy, n_classes, why="the model barely learned the task", hint="train it further"):
    """Flag `near_chance` when the clean accuracy is less than a quarter of the way from chance (1/K for K
    = `n_classes`) to 1, or None: robust accuracies of a model that barely does the task mean nothing.
    `why` and `hint`: the likely cause and the fix, in the message."""
    chance = 1.0 / n_classes
    if accuracy >= chance + NEAR_CHANCE * (1.0 - chance):
        return None
    message = (
        f"clean accuracy {accuracy:.3f}, near chance ({chance:.3f} for {n_classes} classes): {why}, so its "
        f"robust accuracies mean nothing; {hint}."
    )
    return flag("near_chance", message, CARLINI)


def zero_gradient(mask):
    """Flag for points whose input gradient was exactly zero at the clean input (bool `(n,)`), or None."""
    k = int(np.sum(mask))
    if not k:
        return None
    message = (
        f"{k} of {len(mask)} points had an input gradient of exactly zero at the clean input: gradient "
        "attacks cannot move them (saturated softmax, quantized or non-differentiable layers), so only "
        "the score-based attack tested them."
    )
    return flag("zero_gradient", message, PINTOR)


def no_gradient(per_attack):
    """Flag for gradient attacks that could not run because the loss does not depend on the input (a
    non-differentiable layer: round, argmax, a comparison), or None."""
    names = [name for name, record in per_attack.items() if record.get("no_gradient")]
    if not names:
        return None
    message = (
        f"The model's loss does not depend on its input (a non-differentiable layer such as round, argmax "
        f"or a comparison), so the gradient attacks {', '.join(names)} could not run and broke nothing: "
        "only score-based attacks (Square) tested the points, and the robust accuracy may be an "
        "overestimate. Attack a differentiable approximation of the layer (BPDA): gradkit.evaluate(..., "
        "surrogate=...), e.g. the model with that layer replaced by the identity."
    )
    return flag("non_differentiable", message, ATHALYE)


def probabilities(names):
    """Flag for attacks that read the model's probabilities as logits (their logarithms), or None."""
    if not names:
        return None
    message = (
        f"the model outputs probabilities where logits are needed; {', '.join(names)} used their "
        "logarithms as logits. Saturated probabilities (exactly 0 or 1 in float32) give zero or "
        "meaningless gradients: attack a model that returns logits."
    )
    return flag("probabilities", message, CARLINI)


def randomized(difference, version="custom"):
    """Flag for a forward pass whose outputs differ between two identical calls, or None; it proposes
    AutoAttack's "rand" version (EOT) unless that `version` ran."""
    if not difference:
        return None
    message = (
        f"two predictions of the same points differ (max |difference| {difference:.3g}): the model is "
        "randomized, so one attack run measures one draw. "
    )
    if version == "rand":
        message += (
            'The "rand" version attacked the expectation over its randomness (EOT); repeat the '
            "evaluation (another seed) to see how much the figure moves."
        )
    else:
        message += (
            'Attack the expectation over its randomness (EOT): gradkit.evaluate(..., version="rand") '
            "(APGD-CE and APGD-DLR, gradients averaged over eot_iter=20 draws), and repeat the evaluation."
        )
    return flag("randomized_forward", message, ATHALYE)


def unconfirmed(k):
    """Flag for `k` > 0 successes an attack reported but the model's decision rule did not confirm."""
    if not k:
        return None
    message = (
        f"{k} successes reported by the attacks were not confirmed by the model's decision rule on the "
        "returned examples and were not counted: a randomized or batch-dependent forward pass, or an "
        "attack judging success by another rule."
    )
    return flag("unconfirmed_success", message, CARLINI)


def _late_break(entry, broke):
    if entry.attack == "square":
        message = (
            f"{entry.name} (forward passes only) broke {broke} points that the gradient attacks before it "
            "could not: a sign of gradient masking; the gradient attacks alone overestimate robustness."
        )
        return flag("gradient_masking", message, ATHALYE)
    if entry.attack == "fgsm":
        message = (
            f"{entry.name} (one step) broke {broke} points that the iterative attacks before it could "
            "not: the iterative attacks did not converge (step size, steps, or masked gradients)."
        )
        return flag("one_step_beats_iterative", message, CARLINI)
    return None


def late_breaks(entries, per_attack):
    """Flags for Square (or FGSM) breaking points that an earlier iterative gradient attack left robust.

    Square's flag needs at least `MASKING_MIN_POINTS` points and more than `MASKING_SHARE` of those it
    attacked: a random search also breaks the odd point on models without masking, so one point is no
    evidence of masking. The worst case counts every point all the same."""
    flags, after_iterative = [], False
    for entry in entries:
        record = per_attack.get(entry.name, {})
        broke, attacked = record.get("n_broken", 0), record.get("n_points", 0)
        if entry.attack == "square" and (broke < MASKING_MIN_POINTS or broke <= MASKING_SHARE * attacked):
            broke = 0
        if after_iterative and broke and _late_break(entry, broke):
            flags.append(_late_break(entry, broke))
        after_iterative |= entry.attack in _ITERATIVE
    return flags


def one_network(weights):
    """Flag for an ensemble whose heaviest member outweighs all others together (its vote is the
    ensemble's vote), or None. `weights`: the K non-negative ensemble weights."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) < 2:
        return None
    top = int(np.argmax(w))
    rest = float(w.sum() - w[top])
    if w[top] <= rest:
        return None
    message = (
        f"member {top}'s weight ({w[top]:.4g}) exceeds the sum of the other {len(w) - 1} ({rest:.4g}): the "
        f"weighted vote is always member {top}'s vote, the other members can never change it; the "
        "ensemble is one network."
    )
    return flag("one_network", message, TRAMER)


def dominant_gradient(shares, threshold=0.9):
    """Flag for an ensemble member whose weighted input gradient makes up more than `threshold` of the
    members' summed gradient norms on the median point, or None.

    `shares`: float `(K, n)`, alpha_k * ||grad_x CE_k||_2 per member and point. The "loss_sum" gradient
    then follows that member alone, whether or not it can change the vote.
    """
    shares = np.asarray(shares, dtype=np.float64)
    if shares.ndim != 2 or len(shares) < 2:
        return None
    fraction = shares / np.maximum(shares.sum(axis=0, keepdims=True), 1e-30)
    median = np.median(fraction, axis=1)
    top = int(np.argmax(median))
    if median[top] <= threshold:
        return None
    message = (
        f"member {top}'s weighted input gradient is {100 * median[top]:.0f}% of the members' summed "
        "gradient norms on the median point: a loss_sum attack follows that member alone, whether or not "
        "it can change the vote; judge by the vote_margin attacks."
    )
    return flag("dominant_gradient", message, TRAMER)


def _unbounded(evaluation):
    if evaluation.clip_values is None:
        return False
    span = evaluation.clip_values[1] - evaluation.clip_values[0]
    if evaluation.x_adv is None:  # a stream's result (or one read from JSON) holds no x_adv
        d = int((evaluation.scale or {}).get("n_features") or 1)
    else:
        d = int(np.prod(np.shape(evaluation.x_adv)[1:]))
    return evaluation.eps >= span * d ** (1 / evaluation.norm)  # the box's diameter in that norm


def check_curve(evaluations):
    """Flags over evaluations of one model at several eps: robust accuracy that does not fall as eps grows,
    and an unbounded eps (one that reaches every point of the `clip_values` box) leaving points robust.

    Args:
        evaluations: a list of `gradkit.evaluation.Evaluation`, any order; compared per norm.

    Returns:
        list of flags `{"name", "message", "reference"}`, empty when the curve looks sound.

    Raises:
        TypeError: an item is not an `Evaluation`-like result (no `eps`, `norm`, `robust_accuracy`).

    References:
        Carlini et al. (2019), "On evaluating adversarial robustness", sec. 5,
        https://arxiv.org/abs/1902.06705
    """
    evaluations = list(evaluations)
    for i, e in enumerate(evaluations):
        if not all(hasattr(e, a) for a in ("eps", "norm", "robust_accuracy", "clip_values", "x_adv")):
            _checks.fail(f"evaluations[{i}]", "a gradkit.evaluation.Evaluation", type(e).__name__, TypeError)
    flags = []
    for norm in sorted({e.norm for e in evaluations}):
        curve = sorted((e for e in evaluations if e.norm == norm), key=lambda e: e.eps)
        for small, large in zip(curve, curve[1:]):
            if large.eps > small.eps and large.robust_accuracy > small.robust_accuracy:
                message = (
                    f"robust accuracy rises from {small.robust_accuracy:.4f} at eps {small.eps:g} to "
                    f"{large.robust_accuracy:.4f} at eps {large.eps:g}: a larger ball contains the smaller "
                    "one, so the attack failed at the larger eps."
                )
                flags.append(flag("not_decreasing", message, CARLINI))
        for e in curve:
            if _unbounded(e) and e.robust_accuracy > 0:
                message = (
                    f"at eps {e.eps:g}, which reaches every point of clip_values {e.clip_values}, robust "
                    f"accuracy is {e.robust_accuracy:.4f} instead of 0: the attacks fail even without a "
                    "bound."
                )
                flags.append(flag("unbounded_not_zero", message, CARLINI))
    return flags
