"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 of "noise_scale", from the halves of each batch.

`estimates` gives a step's estimates of |G|^2 and tr(Sigma) (McCandlish et al. 2018, Appendix A.1),
`smoothed` and `smoothed_host` their moving averages, whose ratio after the last recorded step is the
logged `noise_scale`.

References:
    McCandlish, Kaplan, Amodei & OpenAI Dota Team (2018), "An Empirical Model of Large-Batch
    Training", Appendix A.1, https://arxiv.org/abs/1812.06162.
"""

import math

import keras
import numpy as np

BETA = 0.99


def estimates(ops, sums, b1, b, scale):
    """Per row, the step's estimates `(|G|^2, S)`, means over the pairs (b1, b) and (b - b1, b).

    With G_B the gradient of a batch of B rows, E|G_B|^2 = |G|^2 + tr(Sigma) / B, where G is the true
    gradient and Sigma the per-row covariance of the gradients. Two batch sizes B_small < B_big give
    unbiased estimates of both terms:

        |G|^2 ~= (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
        S      ~= (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)      (S estimates tr(Sigma))

    In a training step, B_big = b, the step's batch, and G_big its gradient (the one the optimizer
    received, loss scale divided out); B_small = b1 = b // 2 and G_small = g1, the gradient of the
    batch's first b1 rows, and also B_small = b - b1 with g2 = (b G_big - b1 g1) / (b - b1), the
    gradient of the other rows. Where it is exact (JAX and PyTorch, `gradkit.backend.jax.noise_scale`), the
    step's own backward pass gives g1 and g2 (the step's gradient is their weighted sum); elsewhere g1
    takes one more forward and backward pass over the first b1 rows. Per layer, the same with that
    layer's weights.

    The single-step estimates are noisy (the |G|^2 one may be negative). They are exact in expectation
    where the loss is a sum over rows divided by the batch size (Keras' convention, sample weights
    included) plus terms independent of the rows (regularization); layers that mix rows (BatchNorm in
    training mode) or draw new random masks (Dropout) make them approximate. Under gradient
    accumulation, B_big is the micro-batch of the step that applies the update.

    Args:
        ops: `keras.ops` (tensors) or `numpy` (host floats).
        sums: dict of the row sums of "full_sq", "half_sq", "other_sq" (scaled squares).
        b1, b: the half's and the batch's row counts (ints or scalar tensors).
        scale: the loss-scale factor of the squares' gradients (None: 1).
    """
    s2 = 1.0 if scale is None else scale * scale
    full, small = sums["full_sq"] / s2, (sums["half_sq"] / s2, sums["other_sq"] / s2)
    if ops is np:
        b1, b = np.float64(b1), np.float64(b)
    else:
        b1, b = keras.ops.cast(b1, "float32"), keras.ops.cast(b, "float32")
    grad_sq, trace = 0.0, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for b_small, g_small in zip((b1, b - b1), small):
            grad_sq = grad_sq + 0.5 * (b * full - b_small * g_small) / (b - b_small)
            trace = trace + 0.5 * (g_small - full) / (1.0 / b_small - 1.0 / b)
    return grad_sq, trace


def smoothed(ema, step, valid):
    """The averages after a step (tensors): `ema` `(2r + 1,)` holds the r |G|^2 averages, the r S
    averages and the count t; `step` `(2r,)` the step's estimates; `valid` a boolean scalar. Returns
    `(new ema, noise_scale (r,))`.

    Each of |G|^2 and S is smoothed by an exponential moving average over the recorded steps,
    m_t = beta m_(t-1) + (1 - beta) x_t from m_0 = 0, bias-corrected m_t / (1 - beta^t) (Kingma & Ba
    2015, Adam, Algorithm 1), and `noise_scale` = S_hat / |G|^2_hat, the estimator of the paper
    (logged after the last recorded step, not as an epoch mean). beta = `BETA` (0.99: about the last
    100 recorded steps). A step whose estimates are not finite (a batch of one row, a non-finite
    gradient) leaves the averages unchanged.
    """
    ops = keras.ops
    r = (ema.shape[0] - 1) // 2
    moved = ops.where(valid, BETA * ema[: 2 * r] + (1.0 - BETA) * step, ema[: 2 * r])
    count = ema[2 * r] + ops.where(valid, 1.0, 0.0)
    # The bias corrections of the two averages are equal: they cancel in the ratio, which is NaN
    # (0 / 0) before any valid step.
    return ops.concatenate([moved, ops.reshape(count, (1,))]), moved[r:] / moved[:r]


def smoothed_host(ema, step, valid):
    """`smoothed` on host floats: `ema` a list (or None: zeros), `step` a list of 2r floats."""
    r = len(step) // 2
    ema = list(ema) if ema is not None else [0.0] * (2 * r + 1)
    if valid:
        ema = [BETA * m + (1.0 - BETA) * x for m, x in zip(ema[: 2 * r], step)] + [ema[-1] + 1.0]
    noise = [ema[r + i] / ema[i] if ema[i] != 0 else math.nan for i in range(r)]
    return ema, noise
