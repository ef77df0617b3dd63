"""The strong evaluation: `evaluate` runs a cascade of attacks (AutoAttack's standard version by default)
and returns an `Evaluation`: the per-sample worst case, what broke each point, the cost, and signs of
attack failure (`flags`); `check_curve` checks several evaluations at growing eps.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
    Carlini et al. (2019), "On evaluating adversarial robustness", https://arxiv.org/abs/1902.06705
"""

from gradkit.evaluation._curve import robustness_curve
from gradkit.evaluation._flags import check_curve
from gradkit.evaluation._result import Evaluation
from gradkit.evaluation._suite import evaluate

__all__ = [
    "Evaluation",
    "check_curve",
    "evaluate",
    "robustness_curve",
]
