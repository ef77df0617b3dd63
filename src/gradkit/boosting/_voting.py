"""The decision of a boosted ensemble, built on the ensemble's weighted vote (`gradients.weighted_vote`).

With V = sum_t alpha_t onehot(h_t(x)) (the weighted vote, float64 `(n, K)`) and A = sum_t alpha_t,
scikit-learn's SAMME coding of the votes (alpha_t where h_t(x) = c, else -alpha_t / (K - 1)) sums to

    D = (V - (A - V) / (K - 1)) / A,

the decision function of `AdaBoostClassifier` (Zhu et al. 2009). For K = 2 it is one column,
D[:, 1] - D[:, 0] (> 0 means the second class). Probabilities are softmax(D / (K - 1)) (their eq. 15).

References:
    Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),
    https://doi.org/10.4310/SII.2009.v2.n3.a8
"""

import numpy as np
from sklearn.utils.extmath import softmax

from gradkit.gradients import weighted_vote


def decision(votes, total, n_classes):
    """The SAMME decision from the weighted vote `votes` `(n, K)` of learners whose weights sum to `total`.

    Returns:
        float64 `(n, K)`, or `(n,)` when K = 2.
    """
    pred = (votes - (total - votes) / (n_classes - 1)) / total
    if n_classes == 2:
        pred[:, 0] *= -1
        return pred.sum(axis=1)
    return pred


def decision_function(member_ids, weights, n_classes):
    """The decision of all learners: `member_ids` K arrays `(n,)` of class ids, `weights` K alphas."""
    return decision(weighted_vote(member_ids, weights, n_classes), np.sum(weights), n_classes)


def staged_decision_function(member_ids, weights, n_classes):
    """Yields the decision after each learner; the last equals `decision_function`."""
    votes, total = 0.0, 0.0
    for ids, weight in zip(member_ids, weights):
        votes = votes + weighted_vote([ids], [weight], n_classes)
        total += weight
        yield decision(votes, total, n_classes)


def labels(decision_values, classes):
    """Predicted labels `(n,)` (values of `classes`) from a decision: its argmax, or > 0 when K = 2."""
    index = decision_values > 0 if len(classes) == 2 else np.argmax(decision_values, axis=1)
    return classes.take(index.astype(np.int64), axis=0)


def probabilities(decision_values, n_classes):
    """Class probabilities float64 `(n, K)`: softmax of decision / (K - 1) (Zhu et al. 2009, eq. 15)."""
    if n_classes == 2:
        return softmax(np.vstack([-decision_values, decision_values]).T / 2, copy=False)
    return softmax(decision_values / (n_classes - 1), copy=False)
