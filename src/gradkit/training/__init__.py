"""Adversarial training inside `fit`: PGD (Madry et al. 2018), TRADES (Zhang et al. 2019) and fast FGSM
with a random start (Wong, Rice & Kolter 2020), the inner attack compiled into the training step.

`adversarial_training(model, eps=...)` replaces the model's `compute_loss` on the instance, so every
`fit` / `train_on_batch` step attacks its own batch first (TensorFlow and JAX inside the traced step,
PyTorch eagerly; the framework code is `gradkit.backend.input_ascent`). `untrack_adversarial_training`
restores the model. `CatastrophicOverfittingCheck` logs `adv_accuracy` (PGD on a held batch) once per
epoch and warns when it collapses while the FGSM accuracy stays high.

References:
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
    Zhang, Yu, Jiao, Xing, El Ghaoui & Jordan (2019), "Theoretically principled trade-off between
    robustness and accuracy", ICML, https://arxiv.org/abs/1901.08573
    Wong, Rice & Kolter (2020), "Fast is better than free: revisiting adversarial training", ICLR,
    https://arxiv.org/abs/2001.03994
"""

from gradkit.training._install import adversarial_training
from gradkit.training._install import untrack_adversarial_training
from gradkit.training._overfitting import CatastrophicOverfittingCheck
from gradkit.training._overfitting import collapsed

__all__ = [
    "CatastrophicOverfittingCheck",
    "adversarial_training",
    "collapsed",
    "untrack_adversarial_training",
]
