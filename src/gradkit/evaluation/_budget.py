"""A per-feature Linf budget in `evaluate` (`eps` an array): checked once, given to the attacks that
take one (APGD, Square, PGD, BIM, FGSM) and to callables; wherever one radius is read (the report,
the flags, the scale of the threat model, the resume fingerprint's `eps`) it is the budget's max."""

import numpy as np

from gradkit.attacks import check_eps

ONE_RADIUS = ("fab", "fab-t")  # FAB measures one Linf norm against eps: no per-feature budget


def check(eps, norm, entries, skipped, version, certify):
    """`(eps, budget, entries, skipped)`: a number as given with budget None; an array checked by
    `gradkit.attacks.check_eps` (Linf only) as `(its max, the float32 array, ...)`, FAB dropped from a
    version's cascade into `skipped` with the reason.

    Raises:
        ValueError: an array with a norm other than Linf, negative or non-finite entries, an array with
            `certify` or with FAB in a custom list of attacks, or an empty array.
    """
    if np.ndim(eps) == 0:
        return eps, None, entries, skipped
    budget = check_eps(eps, norm)
    if budget.size == 0:
        raise ValueError(f"`eps` as an array must hold a budget per feature. Received: shape {budget.shape}")
    if certify is not None:
        raise ValueError(
            f"`eps` as an array (a per-feature budget) cannot be certified: the bounds take one radius. "
            f"Received: certify={certify!r}"
        )
    one_radius = [e.name for e in entries if e.attack in ONE_RADIUS]
    if one_radius and version == "custom":
        raise ValueError(
            f"`eps` as an array (a per-feature budget) is taken by APGD, Square, PGD, BIM and FGSM; FAB "
            f"measures one norm. Received: attacks including {one_radius}"
        )
    reason = "measures one Linf norm: no per-feature eps"
    dropped = dict.fromkeys(e.attack for e in entries if e.attack in ONE_RADIUS)  # once per attack
    skipped = tuple(skipped) + tuple((attack, reason) for attack in dropped)
    entries = tuple(e for e in entries if e.attack not in ONE_RADIUS)
    return float(budget.max()), budget, entries, skipped
