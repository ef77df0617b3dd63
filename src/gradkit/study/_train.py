"""Training the study's three models, each with `GradientNormCallback` and a per-epoch progress bar.

- `single`: one network trained for `epochs * n_estimators` epochs, as many as AdaBoost.M1's members
  together;
- `adaboost_m1`: `AdaBoostM1` with `n_estimators` rounds of `epochs` epochs;
- `adv_boost`: the same with `adversarial={"attack": "fgsm", "eps": adv_eps, "clip_values": (0, 1)}`
  (round 0 fits twice: clean, then clean + adversarial).

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (FGSM, adversarial training).
"""

import keras
from tqdm import tqdm

from gradkit.boosting import AdaBoostM1
from gradkit.monitor import GradientNormCallback
from gradkit.study._models import build_model


class EpochLog(keras.callbacks.Callback):
    """Keeps `logs["grad_norm"]` of every epoch (of every fit) and advances a progress bar."""

    def __init__(self, bar):
        super().__init__()
        self.bar, self.values = bar, []

    def on_epoch_end(self, epoch, logs=None):
        self.values.append(float((logs or {})["grad_norm"]))
        self.bar.update(1)


def _fit_kwargs(config, epochs, log):
    callbacks = [GradientNormCallback(), log]
    return {"epochs": epochs, "batch_size": config.batch_size, "verbose": 0, "callbacks": callbacks}


def _bar(name, epochs, progress):
    return tqdm(total=epochs, desc=f"train {name}", unit="epoch", disable=not progress)


def train_single(name, config, data, progress):
    """Trains the network `name` for `epochs * n_estimators` epochs.

    Args:
        name: the model's name in the study ("single").
        config: a `StudyConfig`.
        data: the `Dataset` (after `--quick` subsampling and the data-parallel trim).
        progress: whether to show a progress bar.

    Returns:
        `(model, grad_norm)`: the trained `keras.Model` and its per-epoch `grad_norm` (list of float).
    """
    epochs = config.epochs * config.n_estimators
    with _bar(name, epochs, progress) as bar:
        log = EpochLog(bar)
        keras.utils.set_random_seed(config.seed)
        model = build_model(config.model, data.x_train.shape[1:], data.n_classes)
        model.fit(data.x_train, data.y_train, **_fit_kwargs(config, epochs, log))
    return model, log.values


def train_boosted(name, config, data, progress):
    """Trains `AdaBoostM1` ("adaboost_m1"), with FGSM rounds at `adv_eps` for "adv_boost".

    Args and Returns: as for `train_single`; the model is the fitted `AdaBoostM1` and `grad_norm` its
    members' curves one after the other.
    """
    adversarial = None
    epochs = config.epochs * config.n_estimators
    if name == "adv_boost":
        adversarial = {"attack": "fgsm", "eps": config.adv_eps, "clip_values": (0.0, 1.0)}
        epochs += config.epochs  # round 0 trains twice
    with _bar(name, epochs, progress) as bar:
        log = EpochLog(bar)
        estimator = AdaBoostM1(
            lambda: build_model(config.model, data.x_train.shape[1:], data.n_classes),
            n_estimators=config.n_estimators,
            fit_kwargs=_fit_kwargs(config, config.epochs, log),
            random_state=config.seed,
            adversarial=adversarial,
            verbose=0,
        )
        estimator.fit(data.x_train, data.y_train)
    return estimator, log.values
