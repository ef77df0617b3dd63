"""`adversarial_training` / `untrack_adversarial_training`: the model's `compute_loss` becomes adversarial,
on the instance, so that every training step attacks its own batch first.
"""

import keras
import numpy as np

from gradkit import _checks, _keras_internals
from gradkit.training._objective import adversarial_loss, attacked_view
from gradkit.training._settings import check_model, make_settings

_ATTR = "_gradkit_adversarial"


class AdversarialState(keras.metrics.Metric):
    """Holds the installed `Settings` and the random-start generator; logs nothing, never resets.

    A metric because metric variables are the state a stateless JAX step carries (and writes back)
    inside its jit.
    """

    def __init__(self, settings, seed=None):
        super().__init__(name="gradkit_adversarial_state")
        self.settings = settings
        self.generator = keras.random.SeedGenerator(seed)
        self.generator_state = self.generator.state  # tracked: a variable of this metric

    def update_state(self, *args, **kwargs):
        """Nothing to record."""

    def reset_state(self):
        """Keeps the generator state (the random starts must differ from epoch to epoch)."""

    def result(self):
        return {}


def installed_state(model):
    """The `AdversarialState` `adversarial_training` attached to `model`, or None."""
    return vars(model).get(_ATTR)


def untrack_adversarial_training(model):
    """Undoes `adversarial_training`: the class's `compute_loss` again, the state metric removed.

    Args:
        model: a `keras.Model` (one without adversarial training is returned unchanged).

    Returns:
        The model.
    """
    if installed_state(model) is None:
        return model
    _keras_internals.set_tracked_attribute(model, _ATTR, None)
    vars(model).pop("compute_loss", None)
    model.train_function = None
    return model


def _make_compute_loss(model, state):
    """The instance's `compute_loss`: adversarial in training, the class's own in evaluation.

    Why `compute_loss` and not `train_step`: every Keras `train_step` (TensorFlow, JAX, PyTorch) calls
    `self.compute_loss(x, y, y_pred, sample_weight, training=True)` inside its gradient, after the clean
    forward pass. Replacing that one method on the instance keeps Keras' own step (loss scaling,
    metrics, gradient accumulation, `keras.distribution`) and composes with
    `gradkit.track_gradient_norm`, which wraps the class's `train_step`: the norm it logs is then that
    of the adversarial objective.
    """
    base = type(model).compute_loss
    # the logits view is built here, eagerly, for a built and compiled model (else in the first step)
    view = attacked_view(model) if model.built and getattr(model, "loss", None) else None

    def compute_loss(x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not training:
            return base(model, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
        return adversarial_loss(model, state.settings, state.generator, x, y, y_pred, sample_weight, view)

    compute_loss._gradkit = state
    return compute_loss


def adversarial_training(
    model,
    attack="pgd",
    *,
    eps,
    eps_step=None,
    steps=7,
    norm=np.inf,
    clip_values=None,
    random_start=True,
    loss="ce",
    beta=6.0,
    ratio=1.0,
    seed=None,
):
    """Makes `model.fit` train on adversarial examples generated inside the training step.

    After it, each training step attacks its own batch before the update: TensorFlow and JAX trace the
    attack into the compiled step (`tf.GradientTape` / `jax.grad` w.r.t. the inputs), PyTorch runs it
    eagerly (`torch.autograd.grad`). The attack calls the model with `training=False` (no dropout, no
    batch-statistics update); the update then runs a training forward pass on the adversarial batch.
    Idempotent in effect: calling it again replaces the settings. Undo with
    `untrack_adversarial_training`; `evaluate`, `predict` and a saved `.keras` model are unaffected.
    Works with `track_gradient_norm` / `GradientNormCallback` (the logged norm is that of the
    adversarial objective) and with sample weights. A model with one input and one output.

    Args:
        model: a `keras.Model` whose class keeps Keras' `compute_loss` call in `train_step`.
        attack: "pgd" (Madry et al. 2018) or "fgsm" (one step; with `random_start`, the "fast"
            adversarial training of Wong et al. 2020: watch it with `CatastrophicOverfittingCheck`).
        eps: float >= 0, the radius of the threat model, in input units.
        eps_step: float > 0, the step size. Defaults to 2.5 * eps / steps for "pgd", 1.25 * eps for
            "fgsm" with a random start and eps without.
        steps: int >= 1, the PGD steps (ignored for "fgsm"). Defaults to 7.
        norm: `np.inf` (or "inf", "linf") or 2 (or "l2"). Defaults to `np.inf`.
        clip_values: None or `(min, max)`, the valid input range. Defaults to None.
        random_start: start from a uniform point of the eps-ball. Defaults to True.
        loss: "ce" (the compiled loss on the adversarial batch) or "trades" (the compiled loss on the
            clean batch plus `beta` * KL(f(x) || f(x')), the attack maximizing the KL; needs a
            (sparse) categorical cross-entropy; its attack starts like PGD's, where the paper starts
            at x + 0.001 * N(0, 1)). Defaults to "ce".
        beta: float >= 0, the TRADES weight. Defaults to 6.0.
        ratio: float in (0, 1], the fraction of each batch replaced by adversarial rows. Defaults to 1.
        seed: None or int >= 0, seeds the random starts.

    Returns:
        The model.

    Raises:
        TypeError: `model` is not a `keras.Model`; an argument of the wrong type.
        ValueError: an unknown `attack` or `loss`, `eps` < 0, `eps_step` <= 0, `steps` < 1, a bad
            `norm` or `clip_values`, `beta` < 0, `ratio` outside (0, 1], a bad `seed`; a model with
            several inputs or outputs; "trades" on a
            model compiled with a loss that is not a categorical cross-entropy. All before any change.

    References:
        Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
        adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
        Zhang, Yu, Jiao, Xing, El Ghaoui & Jordan (2019), "Theoretically principled trade-off between
        robustness and accuracy" (TRADES), ICML, https://arxiv.org/abs/1901.08573
        Wong, Rice & Kolter (2020), "Fast is better than free: revisiting adversarial training", ICLR,
        https://arxiv.org/abs/2001.03994

    Example:
        >>> gradkit.adversarial_training(model, eps=0.1, clip_values=(0, 1))     # doctest: +SKIP
        >>> model.fit(x, y, epochs=5)                                            # doctest: +SKIP
    """
    settings = make_settings(attack, eps, eps_step, steps, norm, clip_values, random_start, loss, beta, ratio)
    seed = _checks.check_seed(seed)
    check_model(model, settings.loss)
    untrack_adversarial_training(model)
    state = AdversarialState(settings, seed)
    _keras_internals.set_tracked_attribute(model, _ATTR, state)
    object.__setattr__(model, "compute_loss", _make_compute_loss(model, state))
    model.train_function = None
    return model
