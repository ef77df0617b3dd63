"""APGD-T's target classes: AutoAttack's (the most likely classes, by the clean logits) or MALT's.

MALT (Mesoscopic Almost Linearity Targeting; Melamed, Yehudai & Shamir 2024, Algorithm 1) ranks the
classes by how far their decision boundary is in the model's linearization at the clean point `x`:

    d_j = (z_y(x) - z_j(x)) / ||grad z_y(x) - grad z_j(x)||_q,      q the dual norm of the attack's p

(the Lp distance from `x` to the hyperplane where the linearized logits of y and j are equal; `y` the
true label). Only the `a` = 100 most likely classes other than `y` are scored (one Jacobian row each);
the `k` of smallest `d_j` are the targets, nearest first. A class whose gradient difference is zero has
no linearized boundary and ranks last (`d_j = inf`; the authors' code gives it 0, the first rank); ties
keep the logit order. The scores of a batch come from one compiled call per `batch_size` rows: the
gradients of the differences of logits `z_j - z_y` ("logit_diff", FAB's objective), their dual norms
and the ratio in `keras.ops`, on the device; only the `(n, a)` scores return to the host.

References:
    Melamed, Yehudai & Shamir (2024), "MALT Powers Up Adversarial Attacks", NeurIPS,
    https://arxiv.org/abs/2407.02240 (Algorithm 1; the authors' code, odeliamel/MALT, `targeting.py`:
    `testk=100` candidates, `k=9` targets, each attacked by targeted APGD, 100 iterations, 1 restart).
    Croce & Hein (2020), https://arxiv.org/abs/2003.01690 (APGD-T's targets by logit).
"""

import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.attacks import _engine as engine
from gradkit.attacks import geometry
from gradkit.gradients import AttackGradient, cached

SELECTIONS = ("logits", "malt")
CANDIDATES = 100  # MALT's a: the classes scored, by logit (the authors' `testk=100`)


def check_selection(selection, targeted):
    """The checked `target_selection`; ValueError for an unknown one, or "malt" without `targeted`."""
    selection = _checks.check_choice(selection, "target_selection", SELECTIONS)
    if selection == "malt" and targeted is not True:
        _checks.fail(
            "target_selection", "'logits' unless targeted=True (it ranks APGD-T's targets)", selection
        )
    return selection


def ranked(frame, k, selection, norm):
    """APGD-T's `k` targets (capped at C - 1) per sample of the frame, as a list of int `(n,)` arrays in
    rank order: by the clean logits ("logits"), or by MALT's linearized distance `scores` ("malt")."""
    k = min(k, frame.n_classes - 1)
    if selection == "logits":
        ranks = frame.top_classes(k)  # never the label
    else:
        candidates = frame.top_classes(min(CANDIDATES, frame.n_classes - 1))
        order = np.argsort(scores(frame, candidates, norm), axis=1, kind="stable")[:, :k]
        ranks = np.take_along_axis(candidates, order, axis=1)
    return [ranks[:, j] for j in range(ranks.shape[1])]


def scores(frame, candidates, norm):
    """MALT's `d_j` float32 `(n, a)` of the classes `candidates` int `(n, a)` (never the label) at the
    frame's clean points, in the attack's `norm` (np.inf, 2.0 or 1.0); inf where `grad z_y - grad z_j`
    is zero. The `n * a` gradient rows are counted in `frame.n_gradients`."""
    n, a = candidates.shape
    options = frame.objective  # the attack's own combination, output, batch, EOT and surrogate
    objective = _objective(frame.owner, options)
    step = objective.step_function("malt", _score(norm), norm=norm)
    rows = np.repeat(np.arange(n), a)  # sample-major: row i * a + j is candidate j of sample i
    labels = frame.labels[rows].astype(np.int32)

    def init(start, stop, pad):
        x = objective.batch_rows(frame.x0[rows[start:stop]], 0, stop - start, pad)
        return {
            "x": x,
            "score": objective.batch_rows(np.zeros(stop - start, np.float32), 0, stop - start, pad),
        }, {}

    def finish(state, count):
        return engine.to_host(state["score"], count)

    parts = engine.run(objective, step, labels, candidates.reshape(-1).astype(np.int32), {}, init, 1, finish)
    frame.n_gradients += n * a
    return np.concatenate(parts).reshape(n, a)


def _score(norm):
    """The step's update: `d_j = -(z_j - z_y) / ||grad (z_j - z_y)||_q` per row, inf where the norm is 0."""
    dual = geometry.DUAL[float(norm)]

    def update(state, aux, grad, fixed):
        values, _ = aux  # z_j - z_y per row
        size = geometry.row_norm(grad, dual)
        distance = -ops.cast(values, "float32") / ops.maximum(size, geometry.TINY)
        return dict(state, score=ops.where(size > 0, distance, ops.full_like(distance, np.inf)))

    return update


def _objective(owner, like):
    """The cached "logit_diff" objective (`z_t - z_y`, targeted) with the options of the attack's `like`."""
    options = dict(
        loss="logit_diff",
        combination=like.combination,
        targeted=True,
        output=like.output_index,
        batch_size=like.batch_size,
        temperature=like.temperature,
        eot_iter=like.eot_iter,
    )

    def factory():
        return AttackGradient(owner, surrogate=like.surrogate, **options)

    key = None if like.surrogate is None else id(like.surrogate)
    return cached(owner, "attack", factory, surrogate=key, **options)
