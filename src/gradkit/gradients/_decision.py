"""The one decision rule: which class a classifier's output predicts.

Every place in gradkit that turns outputs into class ids (attack success, `evaluate`, the study, boosting's
votes, the catastrophic-overfitting check) reads an output through this module: the argmax of `(n, C)`
scores, or for one unit class 1 where the logit is > 0 or the probability > 0.5 (`classes_from_outputs`);
whether an output holds logits or probabilities is read from the model (`outputs_are_logits`).
"""

import numpy as np

from gradkit.gradients._batches import predict_batched
from gradkit.gradients._logits import activation_name, is_opaque, logits_model, output_layer
from gradkit.gradients._losses import resolve_loss
from gradkit.gradients._outputs import output_index, output_key, output_names, select_output


def compiled_spec(model, index):
    """The `LossSpec` of the compiled loss for output `index`, or None when the model has no loss."""
    if not getattr(model, "loss", None):
        return None
    return resolve_loss(None, model, index)


def outputs_are_logits(model, index=0):
    """True when output `index` of `model` holds logits, False when it holds probabilities.

    A compiled loss with `from_logits=True` means logits; else the output operation decides: a final
    softmax or sigmoid means probabilities (a wrapped torch module: rows of probabilities on a probe,
    `activation_name`), any other Keras layer (a linear `Dense`) logits. For code gradkit cannot read (a
    subclassed model, a `Lambda`, a custom layer, a wrapped torch module), a compiled classification loss
    without `from_logits` means probabilities, anything else logits. The attacks read outputs the same way
    (`gradkit.gradients.AttackGradient`), so they judge success by the same rule.
    """
    spec = compiled_spec(model, index)
    if spec is not None and spec.from_logits:
        return True
    layer = output_layer(model, index)
    if layer is not None and activation_name(layer) in ("softmax", "sigmoid"):
        return False
    if layer is None or is_opaque(layer):
        return not (spec is not None and spec.is_classification)
    return True


def readable(model, index=0):
    """True when gradkit can tell logits from probabilities on output `index` without guessing."""
    spec = compiled_spec(model, index)
    if spec is not None and spec.is_classification:
        return True
    layer = output_layer(model, index)
    return layer is not None and not is_opaque(layer)


def classes_from_outputs(out, from_logits):
    """Class ids `(n,)` int64 from one output `(n, C)` (or `(n,)`): argmax for C >= 2 (ties to the lower
    class id), logits or probabilities alike; for one unit (a binary classifier), class 1 where the logit
    is > 0 (`from_logits`) or the sigmoid probability is > 0.5, the same rule (an argmax over one column
    would predict class 0 for every row)."""
    out = np.asarray(out, dtype=np.float64)
    out = out.reshape(len(out), -1)
    if out.shape[1] == 1:
        return (out[:, 0] > (0.0 if from_logits else 0.5)).astype(np.int64)
    return out.argmax(axis=1).astype(np.int64)


def check_readable(model, index, out_shape):
    """Raises ValueError for a one-unit output whose meaning (logit or probability) gradkit cannot read."""
    units = int(np.prod(out_shape[1:])) if len(out_shape) > 1 else 1
    if units == 1 and not readable(model, index):
        name = _output_name(model, index)
        raise ValueError(
            f"gradkit cannot tell whether the one-unit output {name!r} (shape {tuple(out_shape)}) of model "
            f"{model.name!r} holds a logit (class 1 when > 0) or a probability (class 1 when > 0.5): it "
            "comes from code gradkit cannot read. Compile the model with "
            "loss=keras.losses.BinaryCrossentropy(from_logits=True or False)."
        )


def check_classifier(model, index, out_shape):
    """Raises ValueError unless output `index` of `model` (shape `out_shape`, batch axis first; None:
    unknown, nothing checked) is a classifier's that gradkit can read: `(n, C)` scores (axes of size 1
    between allowed), C >= 2 or one readable unit (`check_readable`) that is not trained as a regression
    (a one-unit output compiled with, say, mean squared error has no decision rule gradkit can trust:
    a threshold of 0 or 0.5 would be a guess), and C >= 2 units compiled with a regression loss end in a
    softmax or sigmoid (without one they are C regression targets, several regression heads, whose argmax
    means nothing; a model gradkit cannot read, a subclassed one, is given the benefit of the doubt)."""
    if out_shape is None:
        return
    name = _output_name(model, index)
    inner = tuple(out_shape[1:-1])
    if any(d != 1 for d in inner):
        raise ValueError(
            f"`model` must be a classifier whose output {name!r} gives one score per class, shaped "
            f"(batch, n_classes). Received: output shape {tuple(out_shape)} from model {model.name!r} "
            "(a spatial or sequence output: reduce it to (batch, n_classes) first)"
        )
    units = int(out_shape[-1] or 0) if len(out_shape) > 1 else 1
    spec = compiled_spec(model, index)
    if units > 1 and spec is not None and not spec.is_classification and _plain_units(model, index):
        raise ValueError(
            f"`model` must be a classifier: its {units}-unit output {name!r} is compiled with the regression "
            f"loss {spec.name!r} and ends in no softmax, so its values are {units} regression targets, not "
            f"scores of {units} classes, and no class decision (argmax) can be trusted. A classifier "
            "trained with a squared loss on one-hot targets: compile it with "
            "loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True) first (compiling changes no "
            "weight; gradkit then reads the outputs as logits)."
        )
    if units == 1 and spec is not None and not spec.is_classification:
        raise ValueError(
            f"`model` must be a classifier: its one-unit output {name!r} is compiled with the regression "
            f"loss {spec.name!r}, so gradkit cannot tell which class a value predicts. Compile a binary "
            "classifier with loss=keras.losses.BinaryCrossentropy(from_logits=True or False)."
        )
    check_readable(model, index, out_shape)


def _plain_units(model, index):
    """True when output `index` comes from a Keras layer gradkit can read and that layer ends in no softmax
    or sigmoid (a linear `Dense`): regression units when the compiled loss is a regression loss."""
    layer = output_layer(model, index)
    return layer is not None and not is_opaque(layer) and activation_name(layer) not in ("softmax", "sigmoid")


def _output_name(model, index):
    names = output_names(model)
    return names[index] if index < len(names) else f"output {index}"


def predict_classes(model, x, *, output=None, batch_size=256):
    """Predicted class ids of one Keras classifier: `(n,)` int64, by the decision rule above.

    Args:
        model: a `keras.Model` classifier (C >= 2 units, or one sigmoid/logit unit).
        x: inputs `(n, ...)` the model takes.
        output: name or index of the classifier output for multi-output models; None for one output.
        batch_size: prediction batch size. Defaults to 256.

    Raises:
        ValueError: a bad `output`; a one-unit output from code gradkit cannot read (compile the model
            with a binary cross-entropy that says `from_logits`).
    """
    index = output_index(model, output)
    out = np.asarray(select_output(predict_batched(model, x, batch_size), output_key(model, index)))
    check_classifier(model, index, out.shape)
    return classes_from_outputs(out, outputs_are_logits(model, index))


def member_forward(member, index):
    """`(model, is_logits)`: the member with its final softmax/sigmoid removed where that is possible.

    Outputs are read as logits or probabilities by `outputs_are_logits` (the rule every prediction in
    gradkit uses); probabilities whose softmax/sigmoid cannot be removed (subclassed models) are turned
    into log-probabilities by `as_logits`.
    """
    if outputs_are_logits(member, index):
        return member, True
    return logits_model(member, index)
