"""Per-sample attack objectives on member logits: the losses (CE, DLR, margin) and how an ensemble combines
its members (loss_sum, logit_mean, prob_mean, vote_margin). Pure `keras.ops`, traced inside one compiled call.

Every objective is a value to MAXIMIZE per sample: untargeted attacks push the true class `y` down,
targeted ones push the target class `t` up.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (the DLR loss, eq. 6, and its
    targeted form, eq. 7).
    Carlini & Wagner (2017), "Towards evaluating the robustness of neural networks", IEEE S&P,
    https://arxiv.org/abs/1608.04644 (the margin loss).
    Tramer, Carlini, Brendel & Madry (2020), "On adaptive attacks to adversarial example defenses",
    NeurIPS, https://arxiv.org/abs/2002.08347 (attack the ensemble's real decision, sec. 5).
"""

from keras import ops

LOSSES = ("ce", "dlr", "margin", "logit_diff")
COMBINATIONS = ("loss_sum", "logit_mean", "prob_mean", "vote_margin")
_LOWEST = -3.0e38  # pushes a class out of a max without inf arithmetic, whatever the logits' scale
_TINY = 1e-12


def _one_hot(labels, z):
    """`(n, C)` float like `z`: 1 at each row's class id, else 0. `ops.one_hot` without its range check
    (labels are checked before any attack; on PyTorch the check reads the ids back to the host on
    every call)."""
    return ops.cast(ops.expand_dims(labels, -1) == ops.arange(z.shape[-1], dtype=labels.dtype), z.dtype)


def _other_max(z, onehot):
    """max_{j != y} z_j, `(n,)`. The true class is replaced by the lowest float32, not shifted by a
    constant: logits of any scale (a model whose logits are multiplied by 1e5) keep it out of the max."""
    return ops.max(ops.where(onehot > 0, _LOWEST, z), axis=-1)


def ce(z, y, t, targeted):
    """Cross-entropy of the logits: CE(y, z) untargeted, -CE(t, z) targeted."""
    if targeted:
        return -ops.sparse_categorical_crossentropy(t, z, from_logits=True)
    return ops.sparse_categorical_crossentropy(y, z, from_logits=True)


def margin(z, y, t, targeted):
    """Margin loss: max_{j != y} z_j - z_y untargeted; z_t - max_{j != t} z_j targeted (> 0: success)."""
    if targeted:
        ot = _one_hot(t, z)
        return ops.sum(z * ot, axis=-1) - _other_max(z, ot)
    oy = _one_hot(y, z)
    return _other_max(z, oy) - ops.sum(z * oy, axis=-1)


def dlr(z, y, t, targeted):
    """Difference of Logits Ratio (Croce & Hein 2020, eq. 6 and 7), maximized.

    Untargeted: -(z_y - max_{j != y} z_j) / (z_pi1 - z_pi3); targeted: -(z_y - z_t) / (z_pi1 -
    (z_pi3 + z_pi4) / 2), with z_pi the logits sorted in decreasing order. Shift- and scale-invariant.
    """
    top = ops.flip(ops.sort(z, axis=-1), axis=-1)
    oy = _one_hot(y, z)
    z_y = ops.sum(z * oy, axis=-1)
    if targeted:
        z_t = ops.sum(z * _one_hot(t, z), axis=-1)
        return -(z_y - z_t) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + _TINY)
    return -(z_y - _other_max(z, oy)) / (top[:, 0] - top[:, 2] + _TINY)


def logit_diff(z, y, t, targeted):
    """The difference of logits z_t - z_y (`targeted` unused): negative while the class y beats t, zero
    on their decision boundary. FAB (Croce & Hein 2020) linearizes it for every t != y."""
    return ops.sum(z * _one_hot(t, z), axis=-1) - ops.sum(z * _one_hot(y, z), axis=-1)


_LOSS_FNS = {"ce": ce, "dlr": dlr, "margin": margin, "logit_diff": logit_diff}


def combine(logits, alphas, y, t, *, loss, combination, targeted, temperature=1.0):
    """The per-sample objective `(n,)` of K members' logits `[(n, C)] * K` with weights `alphas` (K,).

    - loss_sum: sum_k alpha_k L(z_k) (the gradient of the original boosting attacks);
    - logit_mean: L(sum_k alpha_k z_k / sum_k alpha_k);
    - prob_mean: L(log of the weighted mean of the members' softmax probabilities);
    - vote_margin: a margin on the temperature-smoothed weighted vote V = sum_k alpha_k
      softmax(z_k / T) / sum_k alpha_k: max_{j != y} V_j - V_y, or V_t - max_{j != t} V_j (`loss`
      unused, except "logit_diff": V_t - V_y).
    """
    fn = _LOSS_FNS[loss]
    total = ops.sum(alphas)
    if combination == "loss_sum" or len(logits) == 1 and combination != "vote_margin":
        return sum(alphas[k] * fn(z, y, t, targeted) for k, z in enumerate(logits))
    if combination == "logit_mean":
        return fn(sum(alphas[k] * z for k, z in enumerate(logits)) / total, y, t, targeted)
    if combination == "prob_mean":
        mean = sum(alphas[k] * ops.softmax(z, axis=-1) for k, z in enumerate(logits)) / total
        return fn(ops.log(mean + _TINY), y, t, targeted)
    votes = sum(alphas[k] * ops.softmax(z / temperature, axis=-1) for k, z in enumerate(logits)) / total
    return (logit_diff if loss == "logit_diff" else margin)(votes, y, t, targeted)


def as_logits(out, is_logits):
    """Two-or-more-class logits `(n, C)` from a model output: probabilities become log-probabilities;
    one unit (sigmoid) becomes the two-class logits [0, z]."""
    out = ops.cast(out, "float32")
    out = ops.reshape(out, (ops.shape(out)[0], -1))
    if out.shape[-1] == 1:
        z = out if is_logits else ops.log(out + _TINY) - ops.log(1.0 - out + _TINY)
        return ops.concatenate([ops.zeros_like(z), z], axis=-1)
    return out if is_logits else ops.log(ops.clip(out, _TINY, 1.0))


def n_classes_of(out):
    """Classes of a model output shape: its last axis, 2 for one sigmoid unit."""
    c = int(out.shape[-1] or 0)
    return 2 if c == 1 else c
