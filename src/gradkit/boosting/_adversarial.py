"""Adversarial rounds of boosting: the `adversarial` dict, its two modes, and one round's training.

"augment" (default) attacks the ensemble so far between rounds and trains the learner on clean plus
adversarial copies; "fit" trains it with `gradkit.training.adversarial_training` (`train_round`).

References:
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
"""

import inspect

import numpy as np

from gradkit import _checks
from gradkit.attacks import default_eps_step, fgsm, pgd
from gradkit.gradients import resolve_loss
from gradkit.training import adversarial_training, untrack_adversarial_training

ATTACKS = {"fgsm": fgsm, "pgd": pgd}  # the attacks `adversarial` may name
MODES = ("augment", "fit")
_OWN = {"attack", "eps", "mode"}


def _keywords(fn, skip):
    return set(inspect.signature(fn).parameters) - set(skip)


_TRAINING_KEYS = _keywords(adversarial_training, ("model", "attack", "eps"))


PGD_STEPS = 7  # `adversarial_training`'s default; eps_step then defaults to 2.5 * eps / steps (Madry et al.)


def with_defaults(adversarial):
    """`adversarial` with PGD's `steps` and `eps_step` filled in where missing (`gradkit.pgd` needs
    both): 7 steps of 2.5 * eps / steps, as `gradkit.adversarial_training`."""
    if adversarial["attack"] != "pgd":
        return adversarial
    steps = adversarial.get("steps", PGD_STEPS)
    eps = adversarial["eps"]
    return {"steps": steps, "eps_step": default_eps_step(eps, steps), **adversarial}


def mode(adversarial):
    """The mode of a checked `adversarial` dict: "augment" unless it says "fit"."""
    return adversarial.get("mode", "augment")


def _attack_keys(adversarial):
    keys = _keywords(ATTACKS[adversarial["attack"]], ("model", "x", "y", "eps"))
    return keys - {"loss"} if mode(adversarial) == "fit" else keys


def _known(adversarial):
    """The keys an `adversarial` dict may hold: its own, the attack's, and in "fit" mode the training's."""
    extra = _TRAINING_KEYS if mode(adversarial) == "fit" else set()
    return _OWN | _attack_keys(adversarial) | extra


def check(adversarial):
    """Raises unless the `adversarial` dict (its "attack" and "eps" already checked) has a known mode
    and only keys that the attack (or, in "fit" mode, `adversarial_training`) takes.

    Raises:
        ValueError: `adversarial["mode"]` not in `MODES`; an unknown key; in "augment" mode a "loss" that
            is no loss the attack can take (before any training).
    """
    _checks.check_choice(adversarial.get("mode", "augment"), 'adversarial["mode"]', MODES)
    unknown = sorted(set(adversarial) - _known(adversarial))
    if unknown:
        expected = f"free of the unknown keys {unknown} (known: {sorted(_known(adversarial))})"
        _checks.fail("adversarial", expected, adversarial)
    if mode(adversarial) == "augment" and adversarial.get("loss") is not None:
        try:  # the attack's loss, checked before any training (it is first used after round 0's fit)
            resolve_loss(adversarial["loss"])
        except (TypeError, ValueError):
            expected = (
                'in "augment" mode the loss the attack ascends: a Keras loss (identifier, class, instance) '
                'or a callable; the objectives of adversarial training ("ce", "trades") need '
                'adversarial["mode"]="fit"'
            )
            _checks.fail('adversarial["loss"]', expected, adversarial["loss"])


def attack(target, x, ids, adversarial):
    """Adversarial copies of `x` (same shape and dtype) from `gradkit.attacks.fgsm` or `pgd`.

    Args:
        target: the model or `WeightedEnsemble` attacked.
        x: clean inputs `(n, ...)`; ids: their true class ids `(n,)` int64.
        adversarial: `{"attack": "fgsm" | "pgd", "eps": float, **other keyword arguments}`; in "fit"
            mode only the keys the attack function takes (not `loss`) reach it.
    """
    options = {k: v for k, v in with_defaults(adversarial).items() if k != "mode"}
    fn = ATTACKS[options.pop("attack")]
    if mode(adversarial) == "fit":
        options = {k: v for k, v in options.items() if k == "eps" or k in _attack_keys(adversarial)}
    return np.asarray(fn(target, x, ids, **options), dtype=x.dtype).reshape(x.shape)


def train_round(learner, x, ids, targets, sw, adversarial, fit_kwargs, ensemble):
    """Trains one round's Keras `learner` adversarially and returns the examples it is judged on.

        "augment" (default)  the attack runs between rounds against the ensemble so far (round 0:
                             against its own learner after a clean fit); the learner trains on the
                             clean samples plus their adversarial copies, copy i carrying weight w_i
                             (Goodfellow et al. 2015's mix of clean and adversarial examples)
        "fit"                the learner is trained with `gradkit.training.adversarial_training` (the
                             attack inside each training step, Madry et al. 2018), the boosting weights
                             as sample weights; after training the same attack is run against it

    Either way a sample counts as wrong when the learner misclassifies its clean point or the returned
    example. In "fit" mode the keys of `adversarial` go where they belong: those of
    `adversarial_training` (eps_step, steps, norm, clip_values, random_start, loss, beta, ratio, seed)
    to the training, those of the attack function (eps_step, steps, norm, clip_values, random_start,
    seed, batch_size, ...; not `loss`, which there names the training objective) to the attack that
    judges the round.

    Args:
        learner: a fresh compiled Keras model.
        x: training inputs `(n, ...)`; ids: class ids `(n,)` int64; targets: the labels in the form
            the learner's loss takes; sw: sample weights `(n,)` float64, mean 1.
        adversarial: the checked `adversarial` dict; fit_kwargs: dict for `learner.fit`.
        ensemble: the `WeightedEnsemble` of the earlier rounds, or None in round 0.

    Returns:
        The adversarial examples `(n, ...)`, like `x`: against the trained learner ("fit", and round 0
        of "augment"'s clean fit), else against `ensemble`.
    """
    if mode(adversarial) == "fit":
        options = {k: v for k, v in adversarial.items() if k in _TRAINING_KEYS}
        adversarial_training(learner, adversarial["attack"], eps=adversarial["eps"], **options)
        try:
            learner.fit(x, targets, sample_weight=sw, **fit_kwargs)
        finally:  # the member keeps no trace of adversarial training (in memory and in its file)
            untrack_adversarial_training(learner)
        return attack(learner, x, ids, adversarial)
    target = ensemble
    if ensemble is None:  # round 0 attacks its own learner, trained on clean data first
        learner.fit(x, targets, sample_weight=sw, **fit_kwargs)
        target = learner
    x_adv = attack(target, x, ids, adversarial)
    learner.fit(
        np.concatenate([x, x_adv]),
        np.concatenate([targets, targets]),
        sample_weight=np.concatenate([sw, sw]),
        **fit_kwargs,
    )
    return x_adv
