"""Which output of a model: heads named by name (a dict output's key, an output layer's name), never by
position alone, and picked out of what a model's call returns.

Keras orders a dict of outputs differently across versions and backends (keras#20596, #20346: sorted in
`model.outputs`, insertion order in what a call returns on some backends), so a dict's head is always
looked up by its key.
"""

import keras
import numpy as np
from keras import tree

from gradkit import _keras_internals


def output_names(model):
    """The names `output=` takes, one per entry of `model.outputs` and in that order.

    A Functional model built with a dict of outputs is named by the dict's keys (Keras orders dict outputs
    differently across versions, keras#20596, so a head is found by its key, never by its position);
    other models by the names of their output layers (`model.output_names`). Empty for subclassed models.
    """
    keys = _dict_keys(model)
    if keys is not None:
        return keys
    n, layer_names = (
        len(getattr(model, "outputs", None) or []),
        list(getattr(model, "output_names", None) or []),
    )
    return layer_names if len(layer_names) == n else [f"output_{i}" for i in range(n)]


def _dict_keys(model):
    """The keys of a flat dict of outputs in `model.outputs` order, or None for other structures."""
    outputs = list(getattr(model, "outputs", None) or [])
    structure = _keras_internals.output_structure(model)
    if not outputs or not isinstance(structure, dict) or any(tree.is_nested(v) for v in structure.values()):
        return None
    by_tensor = {id(tensor): key for key, tensor in structure.items()}
    return [by_tensor[id(t)] for t in outputs] if all(id(t) in by_tensor for t in outputs) else None


def describe_outputs(model):
    """`'cls' (shape (None, 3)), 'aux' (shape (None, 1))`: the outputs for error messages."""
    outputs = list(getattr(model, "outputs", None) or [])
    return ", ".join(f"{n!r} (shape {tuple(t.shape)})" for n, t in zip(output_names(model), outputs))


def output_index(model, output):
    """Resolves `output` to an index into `model.outputs` (the order of `output_names(model)`).

    `output` is None (a model with one output), a name (a dict output's key, or an output layer's name,
    for dict outputs too) or an index into `model.outputs`. Raises ValueError naming the argument, the
    outputs there are and their shapes.
    """
    outputs = getattr(model, "outputs", None) or [None]
    names = output_names(model)
    if output is None:
        if len(outputs) > 1:
            raise ValueError(
                f"The model has {len(outputs)} outputs {describe_outputs(model)}: say which one the loss is "
                "computed on with `output=` (a name) where the function takes it (the attacks, "
                "input_gradient, weight_gradients, predict_classes, min_norm), or pass a one-output model of "
                f"that head, e.g. keras.Model(model.inputs, model.outputs[{_first_classifier(outputs)}]). "
                "Received: output=None"
            )
        return 0
    if isinstance(output, str):
        layer_names = list(getattr(model, "output_names", None) or [])
        for candidates in (names, layer_names):
            if output in candidates and len(candidates) == len(outputs):
                return candidates.index(output)
        available = describe_outputs(model) or "none by name (a subclassed model: pass an index)"
        raise ValueError(
            f"`output` must be one of the model's output names: {available}. Received: output={output!r}"
        )
    if isinstance(output, (int, np.integer)) and not isinstance(output, bool) and 0 <= output < len(outputs):
        return int(output)
    raise ValueError(
        f"`output` must be a name of one of the model's outputs ({describe_outputs(model) or 'one output'}) "
        f"or an index < {len(outputs)}. Received: output={output!r}"
    )


def _first_classifier(outputs):
    """The index of the first output of more than one unit (class scores), else 0: the example's head."""
    units = [int(t.shape[-1] or 0) if len(t.shape) > 1 else 1 for t in outputs]
    return next((i for i, k in enumerate(units) if k > 1), 0)


def output_key(model, index):
    """Where `select_output` finds output `index` of `model` in what its call returns: the dict key of a
    dict output (found by name whatever order the dict comes in), else the index itself."""
    keys = _dict_keys(model)
    return index if keys is None else keys[index]


def select_output(outputs, key):
    """The output `key` (from `output_key`) of what a model's call returned.

    A str key is looked up in a dict by name; an int key indexes the flattened outputs (`keras.tree`
    order, the order of `model.outputs`); a single tensor is returned as it is.
    """
    if isinstance(key, str):
        if not isinstance(outputs, dict) or key not in outputs:
            found = list(outputs) if isinstance(outputs, dict) else type(outputs).__name__
            raise ValueError(f"The model's call returned no output named {key!r} (it returned {found}).")
        return outputs[key]
    if isinstance(outputs, (dict, list, tuple)):
        return tree.flatten(outputs)[key]
    return outputs


def n_outputs(model, index, x=None):
    """Size of the last axis of output `index` (the number of classes of a classifier); 0 if unknown
    (see `output_shape`)."""
    shape = output_shape(model, index, x)
    return int(shape[-1] or 0) if shape else 0


def output_shape(model, index, x=None):
    """The shape of output `index` (a tuple, batch axis first, None where unknown), or None if unknown.

    A subclassed model has no symbolic outputs: given checked input arrays `x`, its output shape is
    traced from one sample's shape with `model.compute_output_spec` (no real computation).
    """
    if getattr(model, "outputs", None):
        return tuple(model.outputs[index].shape)
    if x is None:
        return None
    cache = vars(model).setdefault("_gradkit_output_shapes", {})  # not through Keras' attribute tracking
    key = (index, repr(tree.map_structure(lambda a: (a.shape[1:], str(a.dtype)), x)))
    if key not in cache:
        specs = tree.map_structure(lambda a: keras.KerasTensor((1, *a.shape[1:]), dtype=str(a.dtype)), x)
        try:
            spec = select_output(model.compute_output_spec(specs), output_key(model, index))
            cache[key] = tuple(spec.shape)
        except Exception:  # a model Keras cannot trace symbolically: the loss alone checks the labels
            cache[key] = None
    return cache[key]
