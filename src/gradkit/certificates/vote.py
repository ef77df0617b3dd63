"""Certificates for a weighted hard vote (AdaBoost.M1, SAMME, `WeightedEnsemble`) from its members'.

The vote is V(x) = argmax_c sum_k w_k [h_k(x) = c] (ties to the lower class id). A member certificate
(c_k, r_k) says h_k(x + e) = c_k for every ||e|| < r_k (c_k = -1, r_k = 0: not certified). Fix a radius
r > 0 and a perturbation ||e|| < r. The members with r_k >= r vote as certified; with

    W_c(r) = sum of w_k over members with c_k = c and r_k >= r,   U(r) = sum of the other members' w_k,

class c gets at least W_c(r) and any other class j at most W_j(r) + U(r) (every uncertified member may
vote for j). So V(x + e) = y for every ||e|| < r whenever

    W_y(r) > max_{j != y} W_j(r) + U(r)                                                        (*)

(strictly: a tie might go to a lower class id). The condition uses nothing but the certificates, and
no weaker condition follows from them: the uncertified members may all vote for the strongest rival.
As r grows past a member's radius its weight moves from W_{c_k} to U, so the margin W_y - max_j W_j - U
never grows: (*) holds on an interval (0, R]. Its right end R, the vote's largest certified radius, is
therefore one of the members' radii: the largest r_k at which (*) holds (0 and class -1 if none), and
the class certified at every r <= R is the same y. The norm is the members' (L2 for randomized
smoothing, Linf or L2 for bound propagation); a vote certified this way is certified in that norm.

Members certified by randomized smoothing certify the vote of the smoothed members, not of the base
networks; members certified by bound propagation certify the vote itself.
"""

import dataclasses

import keras
import numpy as np

from gradkit import _checks
from gradkit.gradients import WeightedEnsemble


@dataclasses.dataclass(frozen=True)
class VoteCertificate:
    """The vote's certificate per point: `classes` int64 `(m,)` (-1: none) and `radii` float64 `(m,)`,
    the largest radius at which the class is certified (0 where none)."""

    classes: np.ndarray
    radii: np.ndarray

    def classes_at(self, radius):
        """The class certified for every ||e|| < `radius` (float >= 0), int64 `(m,)`, -1 where none."""
        radius = _checks.check_real(radius, "radius", minimum=0)
        return np.where((self.classes >= 0) & (self.radii >= radius), self.classes, -1).astype(np.int64)

    def certified(self, y, radius):
        """bool `(m,)`: the vote is certified for the labels `y` `(m,)` at `radius`."""
        y = np.asarray(y)
        if y.shape != self.classes.shape:
            _checks.fail("y", f"one label per point, shape {self.classes.shape}", f"shape {y.shape}")
        return self.classes_at(radius) == y


def member_weights(model):
    """`(members, weights)` of a weighted vote: a `WeightedEnsemble`'s `models` and `weights`, a fitted
    boosted model's `estimators_` and `estimator_weights_` (float64 `(K,)`), or a Keras model with weight 1.

    Raises:
        TypeError: `model` is none of these.
        ValueError: a boosted model that is not fitted.
    """
    if isinstance(model, WeightedEnsemble):
        return list(model.models), np.asarray(model.weights, dtype=np.float64)
    if hasattr(model, "estimator_weights_") or hasattr(model, "build_fn"):
        if not hasattr(model, "estimator_weights_"):
            raise ValueError(f"`model` must be fitted. Received: an unfitted {type(model).__name__}")
        return list(model.estimators_), np.asarray(model.estimator_weights_, dtype=np.float64)
    if isinstance(model, keras.Model):
        return [model], np.ones(1)
    _checks.fail(
        "model", "a gradkit.WeightedEnsemble, a fitted boosted model or a keras.Model", model, TypeError
    )


def vote_certificate(member_classes, member_radii, weights, *, n_classes=None):
    """The weighted hard vote's certificate from its members' certificates (module docstring, (*)).

    Args:
        member_classes: int `(K, m)`: member k's certified class id at point i (the column of its output;
            for a boosted model an index into `classes_`, as its vote counts them), -1 where it abstains.
        member_radii: float `(K, m)` >= 0: member k's certified radius at point i (0 where it abstains).
        weights: `(K,)` finite weights >= 0, not all zero; or the voting model itself (a
            `WeightedEnsemble` or a fitted boosted model, read by `member_weights`).
        n_classes: the number of classes C; None (default): the largest class id + 1 (at least 2).

    Returns:
        A `VoteCertificate`: per point the certified class (-1 none) and the largest radius R at which
        it is certified (0 none): the vote returns that class for every x + e with ||e|| < R.

    Raises:
        ValueError: shapes that disagree, class ids below -1 or >= `n_classes`, negative or non-finite
            radii, negative, non-finite or all-zero weights.
    """
    if not isinstance(weights, (list, tuple, np.ndarray)):
        weights = member_weights(weights)[1]
    w = np.asarray(weights, dtype=np.float64)
    classes = np.asarray(member_classes)
    radii = np.asarray(member_radii, dtype=np.float64)
    if classes.ndim != 2 or radii.shape != classes.shape or w.shape != classes.shape[:1]:
        _checks.fail(
            "member_classes",
            "(K, m) with member_radii of the same shape and K weights",
            f"shapes {classes.shape}, {radii.shape}, weights {w.shape}",
        )
    if not np.issubdtype(classes.dtype, np.integer) or classes.size and classes.min() < -1:
        _checks.fail("member_classes", "integer class ids >= -1 (-1: abstain)", classes.dtype.name)
    if not np.all(np.isfinite(radii)) or np.any(radii < 0):
        _checks.fail("member_radii", "finite radii >= 0", f"min {radii.min()}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        _checks.fail("weights", "finite, >= 0 and not all zero", w.tolist())
    c = _checks.check_int(n_classes, "n_classes", minimum=2, allow_none=True)
    c = c or max(int(classes.max(initial=0)) + 1, 2)
    if classes.max(initial=0) >= c:
        _checks.fail("member_classes", f"class ids < n_classes={c}", int(classes.max()))
    return _certify(classes, radii, w, c)


def _certify(classes, radii, w, n_classes):
    """(*) at every member's radius as candidate r: `W[i, j, c]` the weight certified for c at point i
    at r = the radius of member j; the largest candidate where (*) holds is the vote's radius."""
    valid = (classes >= 0) & (radii > 0)  # (K, m)
    r = np.where(valid, radii, 0.0).T  # (m, K): member k's radius is candidate k
    alive = valid.T[:, None, :] & (r[:, None, :] >= r[:, :, None])  # (m, candidate, member)
    onehot = np.eye(n_classes)[np.where(valid, classes, 0).T]  # (m, member, C)
    votes = np.einsum("ijk,k,ikc->ijc", alive.astype(np.float64), w, onehot)  # W_c at each candidate
    top2 = np.sort(votes, axis=-1)[..., -2:]
    uncertified = w.sum() - votes.sum(axis=-1)
    holds = (top2[..., 1] > top2[..., 0] + uncertified) & (r > 0)  # (m, candidate)
    radius = np.where(holds, r, 0.0).max(axis=1, initial=0.0)
    best = np.argmax(np.where(holds, r, -1.0), axis=1)
    winner = np.argmax(votes[np.arange(len(r)), best], axis=-1)
    certified = radius > 0
    return VoteCertificate(np.where(certified, winner, -1).astype(np.int64), radius.astype(np.float64))
