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
    """ValueError unless every member of `model` has one output and one input: what `evaluate` attacks
    (one head's decision, one array `x`). The message shows the one-output or one-input model to build."""
    for member in as_ensemble(model).models:
        outputs, inputs = _symbolic(member, "outputs"), _symbolic(member, "inputs")
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
        if len(inputs) > 1:
            raise ValueError(
                "`model` must have one input: evaluate attacks models of one input array (a .npz holds "
                f"one x). Received: a model with {len(inputs)} inputs of shapes "
                f"{', '.join(str(tuple(t.shape)) for t in inputs)}. Evaluate a one-input model that "
                f"splits one array into them instead, {_one_input_example(inputs)}; or pass x as a list "
                "or dict of its input arrays (attack_inputs= names those attacked)"
            )


def _one_input_example(inputs):
    """The one-input wrapper of a model of several inputs: exact for flat inputs, described otherwise."""
    sizes = [t.shape[-1] if len(t.shape) == 2 else None for t in inputs]
    if None in sizes:
        return (
            "e.g. a keras.Model(one, model([...])) whose one keras.Input holds the inputs side by side "
            "along an axis and slices them apart (x then holds the arrays concatenated along that axis)"
        )
    ends = [0]
    for size in sizes:
        ends.append(ends[-1] + int(size))
    parts = ", ".join(f"one[:, {a}:{b}]" for a, b in zip(ends[:-1], ends[1:]))
    return (
        f"e.g. one = keras.Input(({ends[-1]},)); wrapped = keras.Model(one, model([{parts}])), evaluated on "
        "x = np.concatenate([x_1, x_2, ...], axis=1) (wrapped.save('one.keras') for gradkit evaluate)"
    )
