"""The certified side of an evaluation: which points no attack in the ball can break, and the cross-check.

`evaluate(..., certify="ibp" | "crown")` asks `gradkit.certificates` for a certificate of every point at
the evaluation's eps: of the model itself, or of an ensemble's or boosted model's weighted hard vote from
its members' certificates (`vote_certificate`, each member certified on its own prediction). A certified
point is a lower bound on robust accuracy; the attacks give the upper bound. A point that is certified and
broken all the same is a bug in one of the two: the flag `certificate_contradicted` names it.
"""

import numpy as np

from gradkit import _checks, certificates
from gradkit.evaluation import _flags
from gradkit.gradients import predict_classes

NORMS = (np.inf, 2.0)


def check_method(method, norm, model):
    """`method` (None, "ibp", "crown-ibp" or "crown") checked against the norm and the model's layers,
    before any work."""
    if method is None:
        return None
    method = _checks.check_choice(method, "certify", certificates.METHODS)
    if norm not in NORMS:
        raise ValueError(
            f"`certify` bounds Linf and L2 balls only. Received: certify={method!r} with "
            f"norm={_checks.norm_name(norm)!r}"
        )
    members, _ = certificates.member_weights(model)
    for member in members:
        certificates.certify(member, np.zeros((0,) + tuple(member.input_shape[1:]), np.float32), [], 0.0)
    return method


def certified_points(model, x, labels, *, method, eps, norm, clip_values, batch_size, mask=None):
    """bool `(n,)`: the points whose label no input of the eps-ball changes (the model's decision rule).

    A Keras model: `gradkit.certify`. A `WeightedEnsemble` or a fitted boosted model (AdaBoost.M1,
    SAMME): its weighted hard vote, each member certified on its own clean prediction and the vote
    certified from them by `gradkit.vote_certificate` at radius eps.

    Args:
        model: a Keras classifier, a `gradkit.WeightedEnsemble` or a fitted boosted model.
        x: float `(n, *input_shape)`, inside `clip_values`.
        labels: int `(n,)` class ids (for a boosted model, indices into its `classes_`).
        method: "ibp", "crown-ibp" or "crown" (see `gradkit.certify`).
        eps: float >= 0, the radius in input units.
        norm: np.inf (Linf) or 2.0 (L2).
        clip_values: None or `(lo, hi)`, the input box the ball is intersected with.
        batch_size: rows per compiled call, or None (`gradkit.certify`'s choice).

    Returns:
        bool `(n,)`: True where the label is certified. A vote at eps 0 certifies nothing (a member
        certificate of radius 0 proves no ball).

    Raises:
        ValueError: a layer without a bound rule (named), a bad `method`, `eps`, `norm`, `clip_values`,
            `x` or `labels` (see `gradkit.certify`).
        TypeError: `model` is none of the above.

    References:
        Gowal et al. (2018), https://arxiv.org/abs/1810.12715 (IBP). Zhang et al. (2018),
        https://arxiv.org/abs/1811.00866 (CROWN).
    """
    members, weights = certificates.member_weights(model)
    options = dict(norm=norm, method=method, clip_values=clip_values, batch_size=batch_size, mask=mask)
    if len(members) == 1 and weights[0] > 0:
        return certificates.certify(members[0], x, labels, eps, **options).certified
    classes, radii = [], []
    for member in members:
        own = predict_classes(member, x, batch_size=batch_size or 256)
        cert = certificates.certify(member, x, own, eps, **options)
        classes.append(np.where(cert.certified, own, -1))
        radii.append(np.where(cert.certified, eps, 0.0))  # certified at eps, perhaps beyond
    n_classes = int(max(np.max(labels, initial=0), np.max(classes, initial=0))) + 1
    vote = certificates.vote_certificate(np.array(classes), np.array(radii), weights, n_classes=n_classes)
    return vote.certified(labels, eps)


def contradicted(certified, robust, start=0):
    """The flag for certified points an attack broke (or that were wrong clean), with their indices
    counted from `start`, or None."""
    if certified is None:
        return None
    wrong = np.flatnonzero(np.asarray(certified) & ~np.asarray(robust))
    if not len(wrong):
        return None
    shown = ", ".join(str(start + i) for i in wrong[:10]) + (" ..." if len(wrong) > 10 else "")
    message = (
        f"{len(wrong)} points are certified robust and yet broken (indices {shown}): a certificate is a "
        "proof that no input of the ball changes the class, so either the bound or the attack's verdict "
        "is wrong there (a layer bounded under other settings than it runs, a randomized or "
        "batch-dependent forward pass). Report it with these points."
    )
    return _flags.flag("certificate_contradicted", message, _flags.CARLINI)
