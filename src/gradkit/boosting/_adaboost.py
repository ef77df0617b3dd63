"""`AdaBoostM1` and `SAMME`: the learner weight alpha_t and the stopping rule of each, nothing else.

Everything else (the loop, the weights, the votes) is `BaseBoosting`'s; `CLASS_DOC` documents both.
"""

import numpy as np

from gradkit.boosting._base import BaseBoosting

# The parameters every boosting estimator documents; `{extra_args}` is the concrete class's own.
CLASS_DOC = """{title}

{rule}

Each round trains a fresh learner from `build_fn()` with the boosting weights passed to
`fit(sample_weight=...)`: the weights scale each sample's cost (Schwenk & Bengio 2000 call this
"weighting the cost function"), no resampling. The weights handed to a Keras learner (or any learner
that is not a scikit-learn estimator) are rescaled to mean 1 over the training set: with weights
summing to 1 each sample's loss would be divided by n and the effective learning rate of the network
would collapse. The boosting quantities themselves use the normalized weights w (sum 1):

    e_t = sum_i w_i [h_t(x_i) != y_i] / sum_i w_i
    AdaBoost.M1: alpha_t = ln((1 - e_t) / e_t),                              stops at e_t >= 1/2
    SAMME:       alpha_t = learning_rate * (ln((1 - e_t) / e_t) + ln(K - 1)), stops at e_t >= 1 - 1/K
    w_i <- w_i * exp(alpha_t [h_t(x_i) != y_i]), then renormalized to sum 1.

A first learner at or above the threshold raises "worse than random"; a later one is discarded and
boosting stops with the earlier rounds. A perfect round (e_t = 0) is kept with alpha_t = 1.0 and ends
boosting, as in scikit-learn (never inf or NaN). Weights are clipped below at machine epsilon before
each round (zero initial weights stay zero), as scikit-learn does, so the non-Keras path reproduces
`sklearn.ensemble.AdaBoostClassifier` exactly.

Args:
    build_fn: callable with no arguments returning a fresh learner each round: a compiled
        keras.Model with K output units (or 1 sigmoid unit when K = 2), or any object with
        `fit(x, y, sample_weight=...)` and `predict(x)` (e.g. a scikit-learn decision stump), which
        gets class ids 0..K-1 and must predict labels `(n,)` (checked every round: probabilities or
        scores raise a ValueError naming `predict`). It is called once at the start of `fit` and
        checked before training. Sample weights: a scikit-learn estimator (`sklearn.base.BaseEstimator`)
        gets the boosting weights exactly as `AdaBoostClassifier` hands them (normalized to sum 1,
        clipped below at machine epsilon), so SAMME reproduces scikit-learn's fit; Keras models and
        other learners get the same weights rescaled to mean 1, so a Keras loss (and the optimizer's
        step size) keeps the scale it has without weights.
    n_estimators: maximum number of rounds, >= 1. Defaults to 10.{extra_args}
    fit_kwargs: dict passed to each learner's `fit` (e.g. `{{"epochs": 5, "batch_size": 32}}`;
        Keras learners default to `verbose=0`), without x, y, sample_weight, class_weight or
        validation_split (boosting weighs every sample itself). Defaults to None.
    random_state: int seed or None. With an int, Keras, Python, numpy and the backend are seeded
        with `random_state + t` before round t is built (as `keras.utils.set_random_seed`, without
        importing TensorFlow on the other backends), so
        every round is reproducible and a resumed fit equals an uninterrupted one. Defaults to None.
    adversarial: None, or a dict `{{"attack": "fgsm" | "pgd", "eps": float, "mode": "augment" |
        "fit", **keyword arguments}}`. `"mode": "augment"` (the default): in round t > 0 the attack
        (`gradkit.attacks.fgsm` / `pgd`) is run against the ensemble of rounds 0..t-1
        (`WeightedEnsemble`, true labels), and the new learner trains on the clean samples plus their
        adversarial copies, copy i carrying boosting weight w_i; round 0 has no ensemble: its learner
        is first trained on the clean data, attacked, then trained further on clean plus adversarial.
        Other keys (eps_step, steps, norm, clip_values, seed, ...) go to the attack; "pgd" defaults to
        `adversarial_training`'s 7 steps of 2.5 * eps / steps. `"mode": "fit"`:
        each round's learner is trained with `gradkit.adversarial_training` (the attack inside every
        training step, Madry et al. 2018; "fgsm" is fast FGSM with a random start), the boosting
        weights as sample weights, then attacked with the same attack; keys go to
        `adversarial_training` (eps_step, steps, norm, clip_values, random_start, loss ("ce" or
        "trades"), beta, ratio, seed) and to the attack (the same, without `loss`; batch_size, ...),
        each getting those it takes; the member keeps no trace of adversarial training. In both modes
        a round's weighted error counts sample i as wrong when the learner misclassifies its clean
        point OR its adversarial example (what it trained against), so a round perfect on clean data
        does not end boosting; alphas and weight updates follow that error. A key that no receiver
        takes, or another mode, raises a ValueError before any training. Defaults to None.
    checkpoint_dir: directory where the fit is saved atomically after every round (Keras
        learners only), and that `fit(..., resume=True)` resumes from. Defaults to None.
    verbose: 0 silent; >= 1 one line per round (error, alpha, seconds). Defaults to 1.

Attributes:
    estimators_: list of the T fitted learners (T <= n_estimators: the rounds actually kept).
    estimator_weights_: float64 `(T,)`, alpha_t of each kept round.
    stop_reason_: str or None: why boosting stopped before `n_estimators` rounds (a perfect round, a
        round worse than random, weights that overflowed), None when it ran them all.
    estimator_errors_: float64 `(T,)`, weighted training error e_t of each kept round.
    classes_: `(K,)` array, `np.unique(y)`. n_classes_: int K.

References:
    {references}
    Schwenk & Bengio (2000), "Boosting neural networks", Neural Computation 12(8),
    https://doi.org/10.1162/089976600300015178 (sample weights as cost weights).
"""


class AdaBoostM1(BaseBoosting):
    def _alpha(self, error, n_classes):
        return float(np.log((1.0 - error) / error))

    def _max_error(self, n_classes):
        return 0.5


class SAMME(BaseBoosting):
    # Its own signature: scikit-learn's get_params reads the parameters from the class's __init__.
    def __init__(
        self,
        build_fn,
        *,
        n_estimators=10,
        learning_rate=1.0,
        fit_kwargs=None,
        random_state=None,
        adversarial=None,
        checkpoint_dir=None,
        verbose=1,
    ):
        super().__init__(
            build_fn,
            n_estimators=n_estimators,
            fit_kwargs=fit_kwargs,
            random_state=random_state,
            adversarial=adversarial,
            checkpoint_dir=checkpoint_dir,
            verbose=verbose,
        )
        self.learning_rate = learning_rate

    def _alpha(self, error, n_classes):
        return float(self.learning_rate * (np.log((1.0 - error) / error) + np.log(n_classes - 1.0)))

    def _max_error(self, n_classes):
        return 1.0 - 1.0 / n_classes


AdaBoostM1.__doc__ = CLASS_DOC.format(
    title="AdaBoost.M1 (Freund & Schapire 1996) over Keras networks (or scikit-learn style learners).",
    rule=(
        "Learner weight alpha_t = ln((1 - e_t) / e_t); stops at e_t >= 1/2 (the weights and the\n"
        "stopping rules: below). For K = 2 it equals `SAMME`."
    ),
    extra_args="",
    references=(
        'Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,\n'
        "    https://dl.acm.org/doi/10.5555/3091696.3091715"
    ),
)

SAMME.__doc__ = CLASS_DOC.format(
    title="SAMME, multi-class AdaBoost (Zhu et al. 2009), over Keras networks or scikit-learn learners.",
    rule=(
        "alpha_t = learning_rate * (ln((1 - e_t) / e_t) + ln(K - 1)); stops at e_t >= 1 - 1/K. With a\n"
        "deterministic learner it reproduces `sklearn.ensemble.AdaBoostClassifier` (weights, errors,\n"
        "decision function, probabilities, predictions).\n\n"
        "Example:\n"
        "    >>> stump = lambda: DecisionTreeClassifier(max_depth=1)       # doctest: +SKIP\n"
        "    >>> clf = SAMME(stump, n_estimators=20).fit(x, y)             # doctest: +SKIP\n"
        "    >>> clf.predict(x)                                            # doctest: +SKIP"
    ),
    extra_args="\n    learning_rate: shrinkage of every alpha_t, > 0. Defaults to 1.0.",
    references=(
        'Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),\n'
        "    https://doi.org/10.4310/SII.2009.v2.n3.a8"
    ),
)
