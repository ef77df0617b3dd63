"""Boosting of Keras networks: AdaBoost.M1 and SAMME, adversarial rounds, checkpoints and resume.

Each round trains a fresh learner from `build_fn()` with the boosting weights passed to
`fit(sample_weight=...)` (no resampling); the learners' weighted hard vote is the ensemble's decision.
The weights, the learner weights and the stopping rules are in the docstrings of `AdaBoostM1` and
`SAMME`; `describe` says what a fitted ensemble really is, `load` reads a saved one.

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1); Freund & Schapire (1997), "A
    decision-theoretic generalization of on-line learning and an application to boosting", JCSS 55(1),
    https://doi.org/10.1006/jcss.1997.1504.
    Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),
    https://doi.org/10.4310/SII.2009.v2.n3.a8 (SAMME; probabilities from eq. 15).
    Schwenk & Bengio (2000), "Boosting neural networks", Neural Computation 12(8),
    https://doi.org/10.1162/089976600300015178 (sample weights as cost weights).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (training on clean plus adversarial examples).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (adversarial training, "mode": "fit").
    Abernethy, Awasthi & Kale (2021), "A multiclass boosting framework for achieving fast and provable
    adversarial robustness", https://arxiv.org/abs/2103.01276, and Zhang et al. (2022), "Building
    robust ensembles via margin boosting", ICML, https://arxiv.org/abs/2206.03362 (boosting for
    robustness; gradkit's adversarial option is the simpler scheme described in `SAMME`, not theirs).
"""

from gradkit.boosting._adaboost import AdaBoostM1
from gradkit.boosting._adaboost import SAMME
from gradkit.boosting._base import BaseBoosting
from gradkit.boosting._describe import describe
from gradkit.boosting._load import load

__all__ = [
    "AdaBoostM1",
    "BaseBoosting",
    "SAMME",
    "describe",
    "load",
]
