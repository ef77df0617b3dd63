"""`gradkit.square`: the Square Attack, score-based (forward passes only), Linf, L2 and L1."""

import numpy as np

from gradkit import _checks
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._session import Session
from gradkit.attacks._square_device import square_device


def square_run(model, x, y=None, *, eps, norm=np.inf, n_queries=5000, p_init=0.8, targeted=False,
               clip_values=None, batch_size=None, output=None, objective="loss_sum", seed=None):  # fmt: skip
    """`gradkit.square` returning `(x_adv, success (n,) bool, session)`."""
    n_queries = _checks.check_int(n_queries, "n_queries", minimum=1)
    p_init = _checks.check_real(p_init, "p_init", minimum=0, strict=True, maximum=1)
    seed = _checks.check_seed(seed)
    if _checks.check_flag(targeted, "targeted") and y is None:  # the predictions would be "fooled" at once
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    session = Session(model, x, y, eps=eps, norm=norm, clip_values=clip_values, batch_size=batch_size,
                      output=output, loss="margin", objective=objective, targeted=targeted,
                      norms=_checks.GRADIENT_NORMS)  # fmt: skip
    if session.eps == 0:
        x_adv = session.x0.copy()
        return x_adv, session.predict(x_adv) != session.labels, session
    targets = session.labels if session.targeted else None
    x_adv, success, _ = square_device(session, session.x0, session.labels, targets, n_queries=n_queries,
                                      p_init=p_init, rng=np.random.default_rng(seed))  # fmt: skip
    return geometry.inside(x_adv, session.x0, session.eps, session.norm), success, session


def square(model, x, y=None, *, eps, norm=np.inf, n_queries=5000, p_init=0.8, targeted=False,
           clip_values=None,
           batch_size=None, output=None, objective="loss_sum", seed=None):  # fmt: skip
    """The Square Attack (Andriushchenko et al. 2020): random search with square-shaped updates.

    Score-based: it needs only the model's outputs (no gradient), so it is the suite's check against
    gradient masking. It maximizes the margin loss (max_{j != y} z_j - z_y; targeted: z_t - max_{j != t}
    z_j) by proposing a random square patch at a time (Linf: Algorithm 1, vertical-stripe start; L2:
    Algorithm 3), the patch side shrinking on the paper's schedule; each sample stops being queried
    once it fools the model's real decision rule (argmax; an ensemble's weighted hard vote).
    Images are read channels-last `(n, h, w, c)`; other shapes as described in `_square.py`.

    Args:
        model: a Keras classifier (single input), a `gradkit.WeightedEnsemble` or a boosting estimator.
        x: float32 `(n, *input_shape)` inside `clip_values`.
        y: class ids `(n,)` or one-hot: the true labels, or the targets when `targeted` (then required).
            Defaults to the model's predictions.
        eps: radius, float >= 0 (input units). norm: `np.inf` (default), `2` or `1` (L1: AutoAttack's
            Square-L1, L1 bumps `1/(k+1)^4` and the exact projection onto the L1-ball and the box).
        n_queries: forward passes per sample, the start included, int >= 1. Defaults to 5000.
        p_init: initial fraction of the input changed per query, in (0, 1]. Defaults to 0.8.
        targeted: False (default) or True (pull towards the classes `y`).
        clip_values, batch_size, output, objective: as in `gradkit.apgd` (objective "vote_margin" uses
            the margin of the smoothed weighted vote).
        seed: None or int >= 0 seeding the random search (the start in numpy, the proposals with
            the backend's random ops inside the compiled step).

    Returns:
        float32 `(n, *input_shape)` adversarial examples in the eps-ball and in `clip_values`.

    Raises:
        ValueError: eps < 0, n_queries < 1, p_init outside (0, 1], a bad norm or labels, `targeted`
            without `y`; before any work.
        TypeError: several inputs, non-integer `n_queries`, a bad `model`.

    References:
        Andriushchenko, Croce, Flammarion & Hein (2020), "Square Attack: a query-efficient black-box
        adversarial attack via random search", ECCV, https://arxiv.org/abs/1912.00049
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (the L1 projection; Square-L1: fra31/auto-attack
        `autoattack/square.py`)
    """
    return square_run(
        model, x, y, eps=eps, norm=norm, n_queries=n_queries, p_init=p_init, targeted=targeted,
        clip_values=clip_values, batch_size=batch_size, output=output, objective=objective, seed=seed,
    )[0]  # fmt: skip
