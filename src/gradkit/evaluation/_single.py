"""What `evaluate` attacks: a model (each member of an ensemble) of one input array and one output, checked
before any work, with the one-input or one-output model to build in the message otherwise."""

from gradkit.gradients import as_ensemble


def _symbolic(model, name):
    """`model.inputs` or `model.outputs` as a list; empty for a model that has none (subclassed)."""
    try:
        return list(getattr(model, name, None) or [])
    except (AttributeError, ValueError):
        return []


def check_single(model):
    """ValueError unless every member of `model` has one output: what `evaluate` attacks (one head's
    decision). The message shows the one-output model to build."""
    for member in as_ensemble(model).models:
        outputs = _symbolic(member, "outputs")
        if len(outputs) > 1:
            units = [int(t.shape[-1] or 0) if len(t.shape) > 1 else 1 for t in outputs]
            head = next((i for i, k in enumerate(units) if k > 1), 0)
            raise ValueError(
                f"`model` must have one output: evaluate attacks one classifier head. Received: a model "
                f"with {len(outputs)} outputs of shapes {', '.join(str(tuple(t.shape)) for t in outputs)} "
                "(in model.outputs order). Evaluate a one-output model of the classifier head instead, e.g. "
                f"head = keras.Model(model.inputs, model.outputs[{head}]) (head.save('head.keras') for "
                "gradkit evaluate)"
            )
