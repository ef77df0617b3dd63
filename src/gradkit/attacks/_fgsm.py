"""Fast Gradient Sign Method: one step of size eps along the sign of the input gradient."""

import numpy as np

from gradkit.attacks import _loop


def fgsm(
    model,
    x,
    y=None,
    *,
    eps,
    norm=np.inf,
    clip_values=None,
    targeted=False,
    loss=None,
    batch_size=None,
    output=None,
):
    """Fast Gradient (Sign) Method: `x + eps * sign(grad_x L(y, f(x)))`, clipped to `clip_values`.

    FGSM is one BIM step with `eps_step = eps` and no random start, so it equals
    `bim(model, x, y, eps=eps, eps_step=eps, steps=1, ...)`. With `norm=2` the step is
    `eps * g / ||g||_2` per sample (the fast gradient method); with `norm=1` it is
    `eps * g / ||g||_1` (foolbox's and ART's L1 step), then the exact projection onto the L1-ball and
    the box (see `gradkit.bim`); a zero gradient gives a zero step.

    Args:
        model: a built Keras classifier, a `gradkit.WeightedEnsemble` (its gradient is
            sum_k alpha_k grad_k, all members in one compiled call) or an object with `as_ensemble()`
            (the boosting estimators). It runs in inference mode and none of its variables change.
        x: float array `(n, *input_shape)` in the model's input units (a model with a Rescaling layer
            inside takes raw units), or a list/dict of arrays for a multi-input model; each input is
            perturbed within its own eps-ball.
        y: class ids `(n,)` or one-hot `(n, n_classes)`: the true labels (untargeted) or the target
            classes (targeted). Defaults to None: the model's hard predictions (for an ensemble the
            weighted hard vote), which avoids label leaking (Kurakin et al. 2017).
        eps: size of the perturbation, a finite float >= 0 in input units; `eps=0` returns a copy of
            `x`.
        norm: `np.inf` (or "inf", "linf"; default), `2` (or "l2") or `1` (or "l1").
        clip_values: None (default, no clipping) or `(min, max)` floats: the valid input range; `x`
            must lie inside it and the result is clipped to it.
        targeted: False (default) increases the loss of `y`; True decreases it (moves towards `y`).
        loss: None (the model's compiled loss) or a loss as in `gradkit.InputGradient`.
        batch_size: rows per compiled call; None (default) attacks all of `x` in one call.
        output: name or index of the attacked output of a multi-output model; only its loss counts.

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: eps < 0, a bad `norm` or `clip_values`, `x` outside `clip_values`, soft or
            out-of-range labels, `targeted=True` without `y`, NaN in `x`; all before any work.
        TypeError: integer inputs (no input gradient exists), a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
        https://arxiv.org/abs/1412.6572
        Kurakin, Goodfellow & Bengio (2017), "Adversarial machine learning at scale", ICLR (label
        leaking), https://arxiv.org/abs/1611.01236

    Example:
        >>> x_adv = gradkit.fgsm(model, x_test, y_test, eps=0.1, clip_values=(0, 1))  # doctest: +SKIP
    """
    return _loop.run(
        model,
        x,
        y,
        eps=eps,
        eps_step=_loop.SINGLE_STEP,
        steps=1,
        norm=norm,
        clip_values=clip_values,
        targeted=targeted,
        loss=loss,
        batch_size=batch_size,
        output=output,
    )
