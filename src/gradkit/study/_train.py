"""Training the study's four models, each with `GradientNormCallback` and a per-epoch progress bar.

`single`, one network trained for `epochs * n_estimators` epochs (as many as AdaBoost.M1's members
together), and `adv_single`, the same network and epochs with `gradkit.adversarial_training`
(`train_single`); `adaboost_m1`, `AdaBoostM1` with `n_estimators` rounds of `epochs` epochs, and
`adv_boost`, the same with adversarial rounds (`train_boosted`). Adversarial training runs at the
study's norm, Linf under `--norm l1` (gradkit's adversarial training takes Linf and L2; see
`gradkit.study._norms`).

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (FGSM, adversarial training).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD adversarial training).
    Wong, Rice & Kolter (2020), "Fast is better than free: revisiting adversarial training", ICLR,
    https://arxiv.org/abs/2001.03994 (FGSM with a random start).
"""

import keras
from tqdm import tqdm

from gradkit import backend
from gradkit.attacks import default_eps_step
from gradkit.boosting import AdaBoostM1
from gradkit.monitor import GradientNormCallback
from gradkit.study._models import build_model
from gradkit.study._norms import ADV_NORMS
from gradkit.training import adversarial_training, untrack_adversarial_training


class EpochLog(keras.callbacks.Callback):
    """Keeps `logs["grad_norm"]` of every epoch, one list per `fit`, and advances a progress bar."""

    def __init__(self, bar):
        super().__init__()
        self.bar, self.values = bar, []

    def on_train_begin(self, logs=None):
        self.values.append([])

    def on_epoch_end(self, epoch, logs=None):
        self.values[-1].append(float((logs or {})["grad_norm"]))
        self.bar.update(1)


SINGLES = ("single", "adv_single")  # one network each; the others are boosted


def adversarial(config):
    """The `adversarial` argument of `adv_boost`: the attack of its rounds (`adv_attack`: PGD with
    `adv_steps` steps and eps_step 2.5 * adv_eps / adv_steps, or FGSM), at `adv_eps` within
    `clip_values` (0, 1), its norm (the study's, Linf under "l1": `_norms.ADV_NORMS`; by name, "linf" or
    "l2", so that the saved boosted model keeps it in its JSON) and the mode (`adv_mode`)."""
    norm = ADV_NORMS[config.norm]
    options = {"attack": config.adv_attack, "eps": config.adv_eps, "norm": norm, "clip_values": (0.0, 1.0)}
    if config.adv_attack == "pgd":
        eps_step = default_eps_step(config.adv_eps, config.adv_steps)
        options.update(steps=config.adv_steps, eps_step=eps_step, seed=config.seed)
    return {**options, "mode": config.adv_mode}


def adversarial_single(config):
    """`gradkit.adversarial_training`'s arguments for `adv_single`: the settings of `adversarial` (the
    attack inside each training step), fgsm with a random start (fast FGSM, Wong et al. 2020); the
    model is saved without any trace of it."""
    options = {k: v for k, v in adversarial(config).items() if k != "mode"}
    return {**options, "random_start": True, "seed": config.seed}


def describe(name, model, config):
    """What the table states about a trained model: epochs, and for boosted models members kept and
    asked, why boosting stopped, and the learner weights."""
    if name in SINGLES:
        return {"epochs": config.epochs * config.n_estimators}
    members, asked = len(model.estimators_), config.n_estimators
    reason = getattr(model, "stop_reason_", None)
    if reason is None and members < asked:
        reason = "perfect round" if model.estimator_errors_[-1] <= 0 else "a round worse than random"
    return {
        "epochs": config.epochs,
        "members": members,
        "asked": asked,
        "stop_reason": reason,
        "estimator_weights": [float(w) for w in model.estimator_weights_],
    }


def _fit_kwargs(config, epochs, log):
    callbacks = [GradientNormCallback(), log]
    return {"epochs": epochs, "batch_size": config.batch_size, "verbose": 0, "callbacks": callbacks}


def _bar(name, epochs, progress):
    return tqdm(total=epochs, desc=f"train {name}", unit="epoch", disable=not progress)


def train_single(name, config, data, progress):
    """Trains the network `name` for `epochs * n_estimators` epochs ("adv_single": adversarially).

    Args:
        name: the model's name in the study, "single" or "adv_single" (`adversarial_single(config)`;
            the returned model no longer trains adversarially, and its file holds no trace of it).
        config: a `StudyConfig`.
        data: the `Dataset` (after `--quick` subsampling and the data-parallel trim).
        progress: whether to show a progress bar.

    Returns:
        `(model, grad_norm)`: the trained `keras.Model` and its per-epoch `grad_norm` (a list holding
        one list of floats).
    """
    epochs = config.epochs * config.n_estimators
    with _bar(name, epochs, progress) as bar:
        log = EpochLog(bar)
        backend.set_random_seed(config.seed)  # no TensorFlow import on the other backends
        model = build_model(config.model, data.x_train.shape[1:], data.n_classes)
        if name == "adv_single":
            adversarial_training(model, **adversarial_single(config))
        model.fit(data.x_train, data.y_train, **_fit_kwargs(config, epochs, log))
    return untrack_adversarial_training(model), log.values


def train_boosted(name, config, data, progress):
    """Trains `AdaBoostM1` ("adaboost_m1"), with adversarial rounds (`adversarial(config)`) for "adv_boost".

    In mode "augment" round 0 of "adv_boost" fits twice (clean, then clean + adversarial); in mode
    "fit" each member trains as `adv_single` does. A boosted model may keep fewer members than asked (a
    perfect or worse-than-random round stops boosting; `describe` records why).

    Args and Returns: as for `train_single`; the model is the fitted `AdaBoostM1` and `grad_norm` one
    list per `fit` (one per member; two for round 0 of "adv_boost" in mode "augment").
    """
    attack = adversarial(config) if name == "adv_boost" else None
    twice = attack is not None and config.adv_mode == "augment"  # its round 0 trains twice
    epochs = config.epochs * (config.n_estimators + twice)
    with _bar(name, epochs, progress) as bar:
        log = EpochLog(bar)
        estimator = AdaBoostM1(
            lambda: build_model(config.model, data.x_train.shape[1:], data.n_classes),
            n_estimators=config.n_estimators,
            fit_kwargs=_fit_kwargs(config, config.epochs, log),
            random_state=config.seed,
            adversarial=attack,
            verbose=0,
        )
        estimator.fit(data.x_train, data.y_train)
        bar.total = bar.n  # boosting may stop early: the bar ends where training ended
        bar.refresh()
    return estimator, log.values
