"""How much each member of an ensemble weighs in its summed input gradient."""

import numpy as np
from keras import tree

from gradkit.gradients._attack_gradient import AttackGradient
from gradkit.gradients._ensemble import as_ensemble


def member_gradient_norms(model, x, labels, batch_size=None):
    """alpha_k * ||grad_x CE_k||_2 per member and point, float64 `(K, n)`: how much each member weighs
    in the summed ("loss_sum") input gradient of an ensemble (one row for a single model).

    Args:
        model: a Keras classifier, a `WeightedEnsemble` or a fitted boosting estimator.
        x: validated float inputs `(n, ...)`; labels: int class ids `(n,)`.
        batch_size: rows per compiled call, or None.
    """
    ensemble = as_ensemble(model)
    rows = []
    for member, weight in zip(ensemble.models, ensemble.weights):
        _, _, grad = AttackGradient(member, batch_size=batch_size)(x, labels)
        flat = np.concatenate([g.reshape(len(labels), -1) for g in tree.flatten(grad)], axis=1)
        rows.append(weight * np.sqrt(np.sum(np.square(flat.astype(np.float64)), axis=1)))
    return np.stack(rows)
