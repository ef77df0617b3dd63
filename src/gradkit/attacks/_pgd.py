"""Projected Gradient Descent: BIM from a random point of the eps-ball (Madry et al. 2018)."""

import numpy as np

from gradkit.attacks import _loop


def pgd(
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
    random_start=True,
    seed=None,
):
    """Projected Gradient Descent: BIM started at a uniformly random point of the eps-ball.

    The random start is drawn with `numpy.random.RandomState(seed)`, so a seeded run repeats exactly on
    every backend: Linf draws each coordinate uniformly in [-eps, eps]; L2 draws uniformly in the ball
    (a gaussian direction with radius eps * u^(1/d), u uniform in [0, 1), d the number of features of
    the input); L1 draws uniformly in the ball (d of d + 1 exponential draws over their sum, random
    signs; Barthe et al. 2005). The start is clipped to `clip_values`. Then `steps` BIM steps follow (see
    `gradkit.bim`); with `random_start=False` PGD equals BIM exactly.

    Args:
        model, x, y, norm, clip_values, targeted, loss, batch_size, output: as in `gradkit.fgsm`.
        eps, eps_step, steps: as in `gradkit.bim` (a common choice: eps_step = 2.5 * eps / steps).
        random_start: start from a random point of the ball (default True) or from `x`.
        seed: None (default: fresh randomness) or an int >= 0 seeding the random start.
        objective, keep: as in `gradkit.bim`.

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: as in `gradkit.bim`, and a bad `seed`; before any work.
        TypeError: a non-integer `steps`, a non-bool `random_start`, integer inputs, a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
        adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
        Voelker, Gosmann & Stewart (2017), "Efficiently sampling vectors and coordinates from the
        n-sphere and n-ball", http://compneuro.uwaterloo.ca/files/publications/voelker.2017.pdf

    Example:
        >>> x_adv = gradkit.pgd(model, x, y, eps=0.1, eps_step=0.025, steps=10, seed=0)  # doctest: +SKIP
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
        random_start=random_start,
        seed=seed,
    )
