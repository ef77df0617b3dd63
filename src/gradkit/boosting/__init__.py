"""Boosting of Keras networks: AdaBoost.M1 and SAMME, adversarial rounds, checkpoints and resume.

Each round trains a fresh learner from `build_fn()` with the boosting weights passed to
`fit(sample_weight=...)`: the weights scale each sample's cost (Schwenk & Bengio 2000 call this
"weighting the cost function"), no resampling. The weights handed to the learner are rescaled to mean
1 over the training set; with weights summing to 1 each sample's loss would be divided by n and the
effective learning rate of the network would collapse. The boosting quantities themselves use the
normalized weights w (sum 1):

    e_t = sum_i w_i [h_t(x_i) != y_i] / sum_i w_i
    AdaBoost.M1: alpha_t = ln((1 - e_t) / e_t),                              stops at e_t >= 1/2
    SAMME:       alpha_t = learning_rate * (ln((1 - e_t) / e_t) + ln(K - 1)), stops at e_t >= 1 - 1/K
    w_i <- w_i * exp(alpha_t [h_t(x_i) != y_i]), then renormalized to sum 1.

A first learner at or above the threshold raises "worse than random"; a later one is discarded and
boosting stops with the earlier rounds. A perfect round (e_t = 0) is kept with alpha_t = 1.0 and ends
boosting, as in scikit-learn (never inf or NaN). Weights are clipped below at machine epsilon before
each round (zero initial weights stay zero), as scikit-learn does, so the non-Keras path reproduces
`sklearn.ensemble.AdaBoostClassifier` exactly.

Modules: `_base` (the loop, one per-round hook), `_adaboost` (alpha and stopping rule of each
estimator), `_params` and `_data` (checks), `_learners` (learner checks, predictions, targets),
`_adversarial` (adversarial rounds: "augment" between rounds, or "fit" through
`gradkit.training.adversarial_training`), `_voting` (the decision, on the ensemble's weighted
vote), `_persistence` (the file format, which knows no estimator class), `_checkpoint` (an
estimator as meta + members and back), `_load`.

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
