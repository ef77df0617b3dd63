"""`CatastrophicOverfittingCheck`: PGD accuracy on a held batch once per epoch, and a warning on collapse.

FGSM training (the "fast" adversarial training of Wong, Rice & Kolter 2020) can overfit catastrophically:
within an epoch the model learns to mask the one-step gradient, its FGSM accuracy stays high while its
PGD accuracy falls to about zero. The check is theirs: evaluate PGD on a small held batch every epoch.
"""

import warnings

import keras
import numpy as np

from gradkit import _checks
from gradkit.attacks import default_eps_step, fgsm, gradient_for, pgd, prepare
from gradkit.gradients import predict_classes


def collapsed(pgd_accuracies, fgsm_accuracy, *, drop=0.2, gap=0.3, floor=0.05):
    """Whether the last PGD accuracy signals catastrophic overfitting (the one-step gradient is masked).

    Args:
        pgd_accuracies: list of floats in [0, 1], the PGD accuracy of each epoch so far (last = now).
        fgsm_accuracy: float in [0, 1], the FGSM accuracy now.
        drop: how far below its best the PGD accuracy must have fallen. Defaults to 0.2.
        gap: how far above the PGD accuracy the FGSM accuracy must stay. Defaults to 0.3.
        floor: a PGD accuracy at or below this counts as collapsed without a drop (the model was never
            robust while FGSM accuracy rose). Defaults to 0.05.

    Returns:
        True when `fgsm_accuracy - pgd_accuracies[-1] >= gap` and either
        `max(pgd_accuracies) - pgd_accuracies[-1] >= drop` or `pgd_accuracies[-1] <= floor`.
    """
    now = pgd_accuracies[-1]
    return fgsm_accuracy - now >= gap and (max(pgd_accuracies) - now >= drop or now <= floor)


class CatastrophicOverfittingCheck(keras.callbacks.Callback):
    """Logs `adv_accuracy` (PGD) and `fgsm_accuracy` on a held batch at each epoch end; warns on collapse.

    The values reach the progress bar, `History`, `CSVLogger` and TensorBoard like any metric. A
    `RuntimeWarning` is issued (once per epoch where it holds) when `collapsed` says the PGD accuracy
    fell by `drop` below its best (or sits at `floor`) while the FGSM accuracy stays `gap` above it.

    Args:
        x: float array `(n, ...)`, a small held batch (a few hundred rows; 256 is plenty).
        y: int class ids `(n,)` or one-hot `(n, classes)`.
        eps: float >= 0, the radius of both attacks (that of the training).
        steps: int >= 1, the PGD steps. Defaults to 10 (step size 2.5 * eps / steps, random start).
        norm, clip_values: as in `gradkit.pgd`. Defaults to `np.inf` and None.
        drop, gap, floor: the thresholds of `collapsed`. Defaults to 0.2, 0.3 and 0.05.
        seed: None or int >= 0, the PGD random start. Defaults to 0.

    Attributes:
        pgd_accuracies, fgsm_accuracies: lists of floats, one per epoch checked.
        warned_epochs: list of int, the epochs that raised the warning.

    References:
        Wong, Rice & Kolter (2020), "Fast is better than free: revisiting adversarial training", ICLR,
        https://arxiv.org/abs/2001.03994

    Example:
        >>> check = gradkit.CatastrophicOverfittingCheck(x[:256], y[:256], eps=0.1)   # doctest: +SKIP
        >>> model.fit(x, y, epochs=10, callbacks=[check])                            # doctest: +SKIP
    """

    def __init__(
        self, x, y, *, eps, steps=10, norm=np.inf, clip_values=None, drop=0.2, gap=0.3, floor=0.05, seed=0
    ):
        super().__init__()
        self.x, self.y = x, np.asarray(y)
        self.eps, self.steps = _checks.check_eps(eps), _checks.check_steps(steps)
        self.norm, self.clip_values = _checks.check_norm(norm), _checks.check_clip_values(clip_values)
        self.drop = _checks.check_real(drop, "drop", minimum=0, maximum=1)
        self.gap = _checks.check_real(gap, "gap", minimum=0, maximum=1)
        self.floor = _checks.check_real(floor, "floor", minimum=0, maximum=1)
        self.seed = _checks.check_seed(seed)
        self.pgd_accuracies, self.fgsm_accuracies, self.warned_epochs = [], [], []

    def on_train_begin(self, logs=None):
        """Checks `x`, `y` and `clip_values` against the model before the first epoch, not after it."""
        prepare(gradient_for(self.model), self.x, self.y, self.clip_values)

    def _accuracy(self, x_adv):
        ids = self.y if self.y.ndim == 1 else np.argmax(self.y, axis=-1)
        pred = predict_classes(self.model, x_adv)  # one unit: a threshold, not an argmax
        return float(np.mean(pred == ids))

    def on_epoch_end(self, epoch, logs=None):
        common = {"eps": self.eps, "norm": self.norm, "clip_values": self.clip_values}
        eps_step = default_eps_step(self.eps, self.steps)
        x_pgd = pgd(self.model, self.x, self.y, eps_step=eps_step, steps=self.steps, seed=self.seed, **common)
        self.pgd_accuracies.append(self._accuracy(x_pgd))
        self.fgsm_accuracies.append(self._accuracy(fgsm(self.model, self.x, self.y, **common)))
        if logs is not None:
            logs["adv_accuracy"] = self.pgd_accuracies[-1]
            logs["fgsm_accuracy"] = self.fgsm_accuracies[-1]
        thresholds = {"drop": self.drop, "gap": self.gap, "floor": self.floor}
        if collapsed(self.pgd_accuracies, self.fgsm_accuracies[-1], **thresholds):
            self.warned_epochs.append(int(epoch))
            warnings.warn(
                f"Catastrophic overfitting at epoch {epoch}: PGD accuracy {self.pgd_accuracies[-1]:.3f} "
                f"(best {max(self.pgd_accuracies):.3f}) while FGSM accuracy is "
                f"{self.fgsm_accuracies[-1]:.3f}. Use a random start with a smaller step "
                "(eps_step=1.25*eps), stop early, or train with PGD (Wong et al. 2020).",
                RuntimeWarning,
                stacklevel=2,
            )
