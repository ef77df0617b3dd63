"""Gradient attacks on Keras models and weighted ensembles: FGSM, BIM and PGD (Linf and L2).

All three are the same projected loop (`_loop.py`, its geometry in `_geometry.py`): FGSM is one BIM step with
`eps_step = eps`; BIM is PGD without random start. Every iterate is projected onto the eps-ball around
the clean input and clipped to `clip_values`. Each step is one compiled call for all ensemble members
that also moves, projects, clips and records the best iterate on the device (the engine, `_engine.py`;
APGD runs on it too, `_apgd_device.py`), and attacks on the same model with the same
`loss`/`output`/`batch_size` share it. The loop over steps is a Python loop: on CPU a PGD fused into one
`jax.lax.fori_loop` measured 7.5x slower than a Python loop of jitted steps.

References:
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572
    Kurakin, Goodfellow & Bengio (2017), "Adversarial examples in the physical world", ICLR workshop,
    https://arxiv.org/abs/1607.02533
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
"""

from gradkit.attacks._apgd_attack import apgd
from gradkit.attacks._bim import bim
from gradkit.attacks._fab import fab
from gradkit.attacks._fgsm import fgsm
from gradkit.attacks._geometry import TINY
from gradkit.attacks._geometry import default_eps_step
from gradkit.attacks._geometry import direction_tensor
from gradkit.attacks._geometry import per_sample_norm_tensor
from gradkit.attacks._geometry import project_and_clip_tensor
from gradkit.attacks._pgd import pgd
from gradkit.attacks._prepare import gradient_for
from gradkit.attacks._prepare import predict_labels
from gradkit.attacks._prepare import prepare
from gradkit.attacks._registry import NAMES
from gradkit.attacks._registry import AttackResult
from gradkit.attacks._registry import decide
from gradkit.attacks._registry import is_ensemble
from gradkit.attacks._registry import run_attack
from gradkit.attacks._square_attack import square

__all__ = [
    "NAMES",
    "TINY",
    "AttackResult",
    "apgd",
    "bim",
    "decide",
    "fab",
    "default_eps_step",
    "direction_tensor",
    "gradient_for",
    "is_ensemble",
    "run_attack",
    "square",
    "fgsm",
    "pgd",
    "predict_labels",
    "per_sample_norm_tensor",
    "prepare",
    "project_and_clip_tensor",
]
