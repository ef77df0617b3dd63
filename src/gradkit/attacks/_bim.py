"""Basic Iterative Method: repeated small FGSM steps, projected onto the eps-ball around the clean input."""

import numpy as np

from gradkit.attacks import _loop


def bim(
    model,
    x,
    y=None,
    *,
    eps,
    eps_step,
    steps,
    norm=np.inf,
    clip_values=None,
    targeted=False,
    loss=None,
    batch_size=None,
    output=None,
    objective="loss_sum",
    keep="first_success",
):
    """Basic Iterative Method (iterative FGSM): `steps` steps of size `eps_step`, no random start.

    Each step moves `eps_step` along sign(g) (Linf), g / ||g||_2 (L2) or g / ||g||_1 (L1) per sample (a
    zero gradient gives a zero step), projects the perturbation onto the eps-ball around the CLEAN input
    (Linf: clip each coordinate to [-eps, eps]; L2: scale the whole per-sample perturbation down to norm
    eps) and clips to `clip_values`. L1 instead projects exactly onto the L1-ball intersected with the
    box (Croce & Hein 2021, Lemma 3.1: soft-thresholding clipped to the box), the closest point that
    is inside both; a rescaling followed by a clip is not (foolbox rescales; this is its step with
    AutoAttack's projection). For sparse L1 attacks prefer `gradkit.apgd(norm=1)`.

    BIM is PGD without random start. Each step is one compiled gradient call for all ensemble members;
    the step loop runs in Python (faster on CPU than a fused loop, see
    `gradkit.attacks`).

    Args:
        model, x, y, norm, clip_values, targeted, loss, batch_size, output: as in `gradkit.fgsm`.
        eps: radius of the ball around `x`, a finite float >= 0 in input units; `eps=0` returns a copy
            of `x`.
        eps_step: step size, a finite float > 0 (commonly eps / steps to 2.5 * eps / steps).
        steps: number of steps, an int >= 1.

        objective: how an ensemble's members are combined into the objective: "loss_sum" (default,
            sum_k alpha_k L_k, the gradient of the original boosting attacks), "logit_mean" (L of the
            weighted mean logits), "prob_mean" (L of the weighted mean probabilities) or "vote_margin"
            (a margin on the softmax-smoothed weighted vote, which follows a boosted model's real hard
            vote); see the README's "Attacking ensembles". On a single model the first three are the
            same objective (L of its own output), and "vote_margin" is the margin of its softmax.
        keep: "first_success" (default): each sample keeps the first iterate that fooled the real
            decision rule (argmax; an ensemble's weighted hard vote), else the iterate with the highest
            objective; "last": the last iterate, as classic implementations return.

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: eps < 0, eps_step <= 0, steps < 1, a bad `norm` or `clip_values`, `x` outside
            `clip_values`, soft or out-of-range labels, `targeted=True` without `y`; before any work.
        TypeError: a non-integer `steps`, integer inputs, a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Kurakin, Goodfellow & Bengio (2017), "Adversarial examples in the physical world", ICLR
        workshop, https://arxiv.org/abs/1607.02533
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (the L1-ball and box projection, Lemma 3.1)

    Example:
        >>> x_adv = gradkit.bim(model, x, y, eps=0.1, eps_step=0.01, steps=20)  # doctest: +SKIP
    """
    return _loop.run(
        model,
        x,
        y,
        eps=eps,
        eps_step=eps_step,
        steps=steps,
        norm=norm,
        clip_values=clip_values,
        targeted=targeted,
        loss=loss,
        batch_size=batch_size,
        output=output,
        objective=objective,
        keep=keep,
    )
