"""What the adversarial training step computes: the inner attack and the outer loss (CE or TRADES).

The inner attack ascends the loss of the compiled model (cross-entropy training, Madry et al. 2018) or
the KL divergence from the clean prediction (TRADES, Zhang et al. 2019) by `backend.input_ascent`, inside
the step; its examples carry no gradient. The outer loss is the model's own `compute_loss` (the compiled
loss, its reduction, sample weights and regularization losses) on the mixed predictions, plus for TRADES
`beta` times the sample-weighted batch mean of KL(f(x) || f(x')) (the gradient flows through both).
"""

import keras
from keras import ops

from gradkit import backend
from gradkit.gradients import member_forward, resolve_loss, training_kwargs
from gradkit.training import _geometry
from gradkit.training._settings import check_trades_loss

_LOG_FLOOR = 1e-7  # probabilities (a model ending in a softmax) are clipped to this before the log


def _log_probabilities(out, from_logits):
    """`(p, log p)` in float32 from logits or from probabilities, shape `(batch, classes)`."""
    out = ops.cast(out, "float32")
    if from_logits:
        return ops.softmax(out, axis=-1), ops.log_softmax(out, axis=-1)
    return out, ops.log(ops.clip(out, _LOG_FLOOR, 1.0))


def kl_per_sample(clean_out, adv_out, from_logits, adv_from_logits=None):
    """KL(p_clean || p_adv) per sample, shape `(batch,)` float32, from the two outputs (logits when
    `from_logits` (`adv_from_logits` for `adv_out`, defaults to `from_logits`), else probabilities),
    summed over the classes."""
    p, log_p = _log_probabilities(clean_out, from_logits)
    _, log_q = _log_probabilities(adv_out, from_logits if adv_from_logits is None else adv_from_logits)
    return ops.sum(p * (log_p - log_q), axis=-1)


def logits_loss(spec, y, z):
    """Per-sample cross-entropy `(batch,)` float32 of the compiled classification loss `spec` taken from
    the logits `z` (the labels `y` in the form `fit` passes them); a saturated softmax cannot zero it."""
    z = ops.cast(z, "float32")
    if spec.kind == "sparse":
        return keras.losses.sparse_categorical_crossentropy(y, z, from_logits=True)
    if spec.kind == "categorical":
        return keras.losses.categorical_crossentropy(ops.cast(y, "float32"), z, from_logits=True)
    return keras.losses.binary_crossentropy(ops.cast(y, "float32"), z, from_logits=True)


def _inner_objective(settings, spec, y, y_clean, is_logits):
    """The scalar the inner attack ascends, as a function of the attacked output on the candidate inputs
    (the logits where `is_logits`): the per-sample losses summed over the batch (each sample's gradient is
    its own)."""
    if settings.loss == "trades":
        clean = ops.stop_gradient(y_clean)
        return lambda out: ops.sum(kl_per_sample(clean, out, spec.from_logits, is_logits))
    if is_logits and spec.is_classification:
        return lambda out: ops.sum(logits_loss(spec, y, out))
    return lambda out: ops.sum(ops.cast(spec.fn(y, ops.cast(out, "float32")), "float32"))


def attacked_view(model):
    """`(model to attack, its output is logits)`: the model with its final softmax/sigmoid removed where
    gradkit can, as the attacks see it: through a saturated softmax the inner
    attack's gradient is exactly zero on JAX and PyTorch, so `fit` would train on the clean loss."""
    if not resolve_loss(None, model).is_classification:
        return model, True  # regression: the output itself
    return member_forward(model, 0)  # not cached on the model: Keras would save the rebuilt model with it


def attacked_forward(model, view=None):
    """`(forward, is_logits)`: `forward(x)` is the output the inner attack differentiates, the logits
    where `attacked_view` could remove the final softmax/sigmoid (`view`: its result, built beforehand
    outside any traced step; rebuilding a model inside a JAX trace leaves tracers in the shared layers,
    which `model.save` then trips on). The rebuilt model has variables of its own: it runs on the
    values of `model`'s variables (inside a traced step, the traced ones)."""
    attacked, is_logits = attacked_view(model) if view is None else view
    kwargs = training_kwargs(model, False)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def forward(z):
        return backend.stateless_call(attacked, trainable, non_trainable, z, **kwargs)[0]

    return forward, is_logits


def adversarial_examples(forward, settings, x, objective, seed):
    """The inner attack: `settings.steps` projected steps of size `eps_step` from `x` (or from a uniform
    point of the eps-ball with `random_start`), inside the eps-ball and `clip_values`.

    Args:
        model: `forward(x)`, the attacked output of the model being trained (called with
            `training=False`: no state changes), see `attacked_forward`.
        settings: the `Settings` of `adversarial_training`.
        x: float tensor `(batch, ...)`, the clean inputs.
        objective: `fn(model output) -> scalar` to ascend.
        seed: the `keras.random.SeedGenerator` of the random start.

    Returns:
        A tensor like `x`, cut from the gradient of the outer loss.
    """
    x0 = ops.stop_gradient(ops.convert_to_tensor(x))
    eps, norm, clip = settings.eps, settings.norm, settings.clip_values
    start = x0
    if settings.random_start:
        start = _geometry.project_and_clip(_geometry.random_start(x0, eps, norm, seed), x0, eps, norm, clip)

    def update(point, grad):
        step = settings.eps_step * _geometry.direction(ops.cast(grad, point.dtype), norm)
        return _geometry.project_and_clip(point + step, x0, eps, norm, clip)

    return backend.input_ascent(forward, objective, start, update, settings.steps)


def _flat_weights(sample_weight, like):
    """Sample weights as float32 `(batch,)` (ones when None)."""
    if sample_weight is None:
        return ops.ones_like(ops.cast(like[:, 0], "float32"))
    return ops.reshape(ops.cast(sample_weight, "float32"), (-1,))


def adversarial_loss(model, settings, seed, x, y, y_pred, sample_weight, view=None):
    """The training loss on the adversarial batch (see the module docstring); `y_pred` is the clean
    forward pass `train_step` already made (used by TRADES and by the rows that `ratio` keeps clean);
    `view`: `attacked_view(model)` when it was built before the step."""
    spec = check_trades_loss(model) if settings.loss == "trades" else resolve_loss(None, model)
    forward, is_logits = attacked_forward(model, view)
    objective = _inner_objective(settings, spec, y, y_pred, is_logits)
    x_adv = adversarial_examples(forward, settings, x, objective, seed)
    y_adv = model(x_adv, **training_kwargs(model, True))
    mask = _geometry.replaced_rows(y_pred, settings.ratio) if settings.ratio < 1 else None
    base = type(model).compute_loss
    if settings.loss == "ce":
        mixed = y_adv if mask is None else ops.where(mask[:, None], y_adv, y_pred)
        return base(model, x=x, y=y, y_pred=mixed, sample_weight=sample_weight, training=True)
    weights = _flat_weights(sample_weight, y_pred)
    if mask is not None:
        weights = weights * ops.cast(mask, "float32")
    kl = ops.sum(kl_per_sample(y_pred, y_adv, spec.from_logits) * weights) / ops.cast(
        ops.shape(weights)[0], "float32"
    )
    clean = base(model, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    return clean + ops.cast(settings.beta * kl, clean.dtype)
