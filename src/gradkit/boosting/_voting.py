"""The decision of a boosted ensemble, built on the ensemble's weighted vote (`gradients.weighted_vote`):
scikit-learn's SAMME decision function and probabilities (`decision`, `probabilities`), and the
scikit-learn decision methods of a fitted estimator (`VotingMixin`).

References:
    Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),
    https://doi.org/10.4310/SII.2009.v2.n3.a8
"""

import numpy as np
from sklearn.utils.extmath import softmax

from gradkit.gradients import weighted_vote


def decision(votes, total, n_classes):
    """The SAMME decision from the weighted vote `votes` `(n, K)` of learners whose weights sum to `total`.

    With V = sum_t alpha_t onehot(h_t(x)) (the weighted vote, float64 `(n, K)`) and A = sum_t alpha_t,
    scikit-learn's SAMME coding of the votes (alpha_t where h_t(x) = c, else -alpha_t / (K - 1)) sums to

        D = (V - (A - V) / (K - 1)) / A,

    the decision function of `AdaBoostClassifier` (Zhu et al. 2009). For K = 2 it is one column,
    D[:, 1] - D[:, 0] (> 0 means the second class). Probabilities are softmax(D / (K - 1)) (their
    eq. 15, `probabilities`).

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


class VotingMixin:
    """The scikit-learn decision methods of a fitted boosting estimator, on `self._member_ids(x)`,
    `estimator_weights_`, `n_classes_` and `classes_`."""

    def decision_function(self, x):
        """Weighted SAMME votes: float64 `(n, K)`, or `(n,)` for K = 2 (> 0 means `classes_[1]`).

        Column c is sum_t alpha_t (1 if h_t(x) = c else -1 / (K - 1)) / sum_t alpha_t, exactly as
        scikit-learn's `AdaBoostClassifier.decision_function`.
        """
        return decision_function(self._member_ids(x), self.estimator_weights_, self.n_classes_)

    def staged_decision_function(self, x):
        """Yields the decision function after each round (see `decision_function`)."""
        yield from staged_decision_function(self._member_ids(x), self.estimator_weights_, self.n_classes_)

    def predict(self, x):
        """Weighted-vote class labels `(n,)` (values of `classes_`)."""
        return labels(self.decision_function(x), self.classes_)

    def staged_predict(self, x):
        """Yields the predicted labels after each round; the last equals `predict(x)`."""
        for decision in self.staged_decision_function(x):
            yield labels(decision, self.classes_)

    def predict_proba(self, x):
        """Class probabilities float64 `(n, K)`: softmax of decision / (K - 1) (Zhu et al. 2009, eq. 15)."""
        return probabilities(self.decision_function(x), self.n_classes_)

    def staged_score(self, x, y, sample_weight=None):
        """Yields the (weighted) accuracy on `(x, y)` after each round, one value per fitted round."""
        from sklearn.metrics import accuracy_score

        for pred in self.staged_predict(x):
            yield accuracy_score(y, pred, sample_weight=sample_weight)
