"""`describe`: what a fitted boosting ensemble really is, before anyone attacks or reports it.

A weighted hard vote can hide that the ensemble is one network: when one member's weight exceeds the sum
of all the others, its vote is the ensemble's vote whatever the others say. And the gradient an attack
follows, sum_k alpha_k grad_x L_k, can be dominated by a member that never changes the vote.

References:
    Tramer, Carlini, Brendel & Madry (2020), "On adaptive attacks to adversarial example defenses",
    NeurIPS, https://arxiv.org/abs/2002.08347 (attack the ensemble's real decision).
"""

import numpy as np

from gradkit.gradients import check_x, member_gradient_norms


def outvoted(weights):
    """Indices of the members that can never change the weighted vote because the heaviest member's
    weight exceeds the sum of all the others (all but the heaviest then), else an empty list."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) < 2:
        return []
    top = int(np.argmax(w))
    return [k for k in range(len(w)) if k != top] if w[top] > w.sum() - w[top] else []


def gradient_shares(ensemble, x, y):
    """Each member's share of the summed weighted input-gradient norms `(K,)` (medians over the points):
    alpha_k ||grad_x CE_k|| / sum_j alpha_j ||grad_x CE_j||, at `(x, y)`."""
    norms = member_gradient_norms(ensemble, x, y)
    return np.median(norms / np.maximum(norms.sum(axis=0, keepdims=True), 1e-30), axis=1)


def describe(estimator, x=None, y=None):
    """What a fitted boosting estimator is, before it is attacked or reported.

    Args:
        estimator: a fitted `AdaBoostM1` or `SAMME`.
        x: optional inputs `(n, ...)` float32 (Keras learners), where the members' gradients are compared.
        y: optional labels `(n,)` (values of `classes_`) for `x`.

    Returns:
        dict: "class", "n_estimators" (asked), "members" (kept), "estimator_weights" and
        "estimator_errors" (lists of float), "stop_reason" (str or None), "outvoted_members" (indices of
        members that can never change the vote, see `outvoted`), "warnings" (list of str); with `x` and
        `y` also "gradient_shares": per member, the median share of its weighted input-gradient norm in
        the members' sum (a member above 0.9 dominates the loss_sum gradient).

    Raises:
        sklearn.exceptions.NotFittedError: the estimator is not fitted.
        TypeError: `x` given for learners that are not Keras models (no input gradients exist).

    References:
        Tramer, Carlini, Brendel & Madry (2020), "On adaptive attacks to adversarial example defenses",
        NeurIPS, https://arxiv.org/abs/2002.08347
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    weights = np.asarray(estimator.estimator_weights_, dtype=np.float64)
    info = {
        "class": type(estimator).__name__,
        "n_estimators": estimator.n_estimators,
        "members": len(estimator.estimators_),
        "estimator_weights": weights.tolist(),
        "estimator_errors": np.asarray(estimator.estimator_errors_, dtype=np.float64).tolist(),
        "stop_reason": getattr(estimator, "stop_reason_", None),
        "outvoted_members": outvoted(weights),
        "warnings": [],
    }
    if info["outvoted_members"]:
        top = int(np.argmax(weights))
        info["warnings"].append(
            f"member {top}'s weight {weights[top]:.4g} exceeds the sum of the others "
            f"({weights.sum() - weights[top]:.4g}): the weighted vote is member {top}'s vote, the ensemble "
            "is one network."
        )
    if x is not None and y is not None and info["members"] > 1:
        ensemble = estimator.as_ensemble()
        x, _ = check_x(ensemble.models[0], x)
        ids = np.searchsorted(estimator.classes_, np.asarray(y))
        shares = gradient_shares(ensemble, x, ids.astype(np.int32))
        info["gradient_shares"] = shares.tolist()
        if shares.max() > 0.9:
            info["warnings"].append(
                f"member {int(shares.argmax())}'s weighted input gradient is {100 * shares.max():.0f}% of "
                "the members' sum on the median point: a loss_sum attack follows it alone; use vote_margin."
            )
    return info
