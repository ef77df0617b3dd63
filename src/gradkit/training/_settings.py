"""The settings of adversarial training, checked once before anything is installed."""

import dataclasses

from gradkit import _checks, gradients
from gradkit.attacks import default_eps_step
from gradkit.gradients import resolve_loss

ATTACKS = ("pgd", "fgsm")
LOSSES = ("ce", "trades")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Checked arguments of `adversarial_training` (floats, ints and bools in canonical form)."""

    attack: str
    eps: float
    eps_step: float
    steps: int
    norm: float
    clip_values: tuple | None
    random_start: bool
    loss: str
    beta: float
    ratio: float


def _default_eps_step(attack, eps, steps, random_start):
    """2.5 * eps / steps for PGD (Madry et al. 2018); for FGSM 1.25 * eps from a random start (Wong, Rice &
    Kolter 2020), else eps (Goodfellow et al. 2015)."""
    if attack == "pgd":
        return default_eps_step(eps, steps)
    return 1.25 * eps if random_start else eps


def check_model(model, loss):
    """TypeError unless `model` is a `keras.Model`; ValueError for a model with several inputs or outputs
    (one attacked input and one loss); for TRADES a compiled model must have a classification loss (an
    uncompiled one is checked when the training step is first traced)."""
    gradients.check_model(model)
    for what in ("inputs", "outputs"):
        tensors = getattr(model, what, None) if model.built else None
        if tensors is not None and len(tensors) != 1:
            names = [getattr(t, "name", "?") for t in tensors]
            raise ValueError(
                "`model` must have one input and one output for adversarial training (one attacked input, "
                f"one loss). Received: model {model.name!r} with {len(tensors)} {what} {names}"
            )
    if loss == "trades" and getattr(model, "loss", None) is not None:
        check_trades_loss(model)


def check_trades_loss(model):
    """The model's compiled loss as a `LossSpec`; ValueError unless it is a categorical cross-entropy."""
    spec = resolve_loss(None, model)
    if spec.kind not in ("sparse", "categorical"):
        expected = "compiled with a (sparse) categorical cross-entropy for loss='trades'"
        _checks.fail("model", expected, f"<model compiled with {spec.name}>")
    return spec


def make_settings(attack, eps, eps_step, steps, norm, clip_values, random_start, loss, beta, ratio):
    """Checks every argument of `adversarial_training` and returns the `Settings`.

    Raises:
        TypeError: a value of the wrong type (a non-integer `steps`, a non-bool `random_start`, ...).
        ValueError: an unknown `attack` or `loss`; `eps` < 0; `eps_step` <= 0; `steps` < 1; a bad
            `norm` or `clip_values`; `beta` < 0; `ratio` outside (0, 1].
    """
    attack = _checks.check_choice(attack, "attack", ATTACKS)
    eps = _checks.check_eps(eps)
    steps = 1 if attack == "fgsm" else _checks.check_steps(steps)
    random_start = _checks.check_flag(random_start, "random_start")
    if eps_step is None:
        eps_step = _default_eps_step(attack, eps, steps, random_start) or 1.0  # eps=0: any step is a no-op
    return Settings(
        attack=attack,
        eps=eps,
        eps_step=_checks.check_eps_step(eps_step),
        steps=steps,
        norm=_checks.check_norm(norm),
        clip_values=_checks.check_clip_values(clip_values),
        random_start=random_start,
        loss=_checks.check_choice(loss, "loss", LOSSES),
        beta=_checks.check_real(beta, "beta", minimum=0),
        ratio=_checks.check_real(ratio, "ratio", minimum=0, strict=True, maximum=1),
    )
