"""What every attack does before its first step: the compiled functions it uses (cached on the model or
ensemble object, so repeated attacks trace once), argument and range checks, and labels from predictions.
"""

import keras
from keras import tree

from gradkit.gradients import (
    AttackGradient,
    InputGradient,
    WeightedEnsemble,
    as_ensemble,
    cached,
    check_attack_loss,
    check_classifier,
    check_x,
    compiled_spec,
    n_outputs,
    output_index,
    output_shape,
    outputs_are_logits,
)

OBJECTIVE_LOSSES = ("ce", "dlr", "margin")


def owner(model):
    """The object compiled functions are cached on: the model or ensemble itself, or the ensemble of a
    boosting estimator (`as_ensemble()`)."""
    return model if isinstance(model, (keras.Model, WeightedEnsemble)) else as_ensemble(model)


def step_for(model, grad, *, loss, objective, targeted, output, batch_size, temperature=1.0, eot_iter=1,
             surrogate=None):  # fmt: skip
    """The cached `AttackGradient` for a classifier objective, or None where only `grad` applies.

    `eot_iter` (forward passes averaged per step, EOT) and `surrogate` (BPDA) are `AttackGradient`'s.

    A Keras cross-entropy (the compiled one or `loss=`) is attacked as "ce" on the logits. None when the
    loss is a Keras loss other than cross-entropy (regression), or for an ensemble with
    `normalize_gradients=True` (per-member normalization lives in `InputGradient`).
    """
    if isinstance(loss, str) and loss in OBJECTIVE_LOSSES:
        name = loss
    else:  # a Keras cross-entropy (compiled or given, any spelling) is attacked as "ce"
        name = "ce" if grad.spec.is_classification else None
        if name:  # "ce" has no label smoothing nor ignored class: refused rather than dropped
            check_attack_loss(grad.spec)
    if name is None or grad.ensemble.normalize_gradients:
        if eot_iter != 1 or surrogate is not None:
            raise ValueError(
                "`eot_iter` and `surrogate` need a classification loss (ce, dlr or margin) and an ensemble "
                f"without normalize_gradients. Received: eot_iter={eot_iter!r}, surrogate={surrogate!r}"
            )
        if objective != "loss_sum":
            raise ValueError(
                "`objective` other than 'loss_sum' needs a classification loss (ce, dlr or margin) and an "
                f"ensemble without normalize_gradients. Received: objective={objective!r}"
            )
        return None
    options = dict(loss=name, combination=objective, targeted=targeted, output=output, batch_size=batch_size,
                   temperature=temperature, eot_iter=eot_iter)  # fmt: skip

    def factory():
        return AttackGradient(owner(model), surrogate=surrogate, **options)

    key = None if surrogate is None else id(surrogate)  # a model's repr is not unique; the entry keeps it
    return cached(owner(model), "attack", factory, surrogate=key, **options)


def _default_loss(model, output):
    """The Keras loss labels are checked against for an objective loss ("ce", "dlr", "margin"): the
    compiled one if any, else binary cross-entropy on a one-unit output (a binary classifier, labels 0/1)
    and sparse categorical cross-entropy otherwise, on logits or probabilities as `outputs_are_logits`
    reads the output."""
    first = as_ensemble(model).models[0]
    if getattr(first, "loss", None) and compiled_spec(first, output_index(first, output)).is_classification:
        return None  # labels as the compiled classification loss takes them; a regression loss is not one
    index = output_index(first, output)
    from_logits = outputs_are_logits(first, index)
    if n_outputs(first, index) == 1:
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def gradient_for(model, *, loss=None, output=None, batch_size=None):
    """The `InputGradient` (inference mode) for `model`, cached on the model or ensemble object.

    Attacks with the same `(loss, output, batch_size)` on the same object reuse one compiled function,
    so a robustness curve over many epsilons traces once (`.trace_count`). Keras models share the cache
    of `gradkit.input_gradient`. Other objects (boosting estimators) are turned into an ensemble with
    `as_ensemble`, and the cache lives on that ensemble. `loss=None` on a model compiled without a loss
    means "ce" (the cross-entropy of its logits).
    """
    model = owner(model)
    if loss is None and not getattr(as_ensemble(model).models[0], "loss", None):
        loss = "ce"  # an uncompiled classifier is attacked through its cross-entropy, as APGD-CE does
    keras_loss = _default_loss(model, output) if loss in OBJECTIVE_LOSSES else loss

    def factory():
        return InputGradient(model, loss=keras_loss, training=False, output=output, batch_size=batch_size)

    return cached(model, "input", factory, loss=loss, training=False, output=output, batch_size=batch_size)


def _leaf_names(x):
    if isinstance(x, dict):
        return list(x)
    if isinstance(x, (list, tuple)):
        return [f"x[{i}]" for i in range(len(x))]
    return ["x"]


def check_range(x, clip_values):
    """Raises ValueError when a leaf of the validated `x` lies outside `clip_values`."""
    if clip_values is None:
        return
    lo, hi = clip_values
    for name, leaf in zip(_leaf_names(x), tree.flatten(x)):
        if leaf.min() < lo or leaf.max() > hi:
            raise ValueError(
                f"`x` must lie inside clip_values={clip_values} (input {name!r} spans "
                f"[{leaf.min()}, {leaf.max()}]): the attack could not keep it in range otherwise."
            )


def predict_labels(grad, x, batch_size=None):
    """Hard predictions `(n,)` int64 of the attacked output: the weighted hard vote of
    `WeightedEnsemble.predict`, reading one-unit outputs as the attack's loss does (logits or not)."""
    votes = grad.ensemble.decision_function(
        x, batch_size or 256, output=grad.output_index, from_logits=[spec.from_logits for spec in grad.specs]
    )
    return votes.argmax(axis=1)


def prepare(grad, x, y, clip_values, batch_size=None):
    """Validated `(x, labels, n)`; `y=None` becomes the model's hard predictions (validated first)."""
    check_classifiers(grad, x)
    if y is None:
        if not grad.spec.is_classification:
            raise ValueError(
                f"`y` is required for the loss {grad.spec.name!r}: predictions are only used as labels "
                "for classification losses. Received: y=None"
            )
        x, _ = check_x(grad.ensemble.models[0], x)
        check_range(x, clip_values)
        y = predict_labels(grad, x, batch_size)
    x, labels, _, n = grad.check(x, y)
    check_range(x, clip_values)
    return x, labels, n


def check_classifiers(grad, x):
    """ValueError before any work unless every member's attacked output is a classifier's (`(n, C)`
    scores; `gradkit.gradients.check_classifier`)."""
    if isinstance(x, (list, tuple, dict)):
        return  # several inputs: the shapes are traced from the checked arrays in `grad.check`
    x, _ = check_x(grad.ensemble.models[0], x)
    for model in grad.ensemble.models:
        check_classifier(model, grad.output_index, output_shape(model, grad.output_index, x))
