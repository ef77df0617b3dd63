"""Checks and helpers for what a model takes and gives: its input arrays, its outputs, its mode flag.

Every check runs before any work starts and names the argument in its message.
"""

import inspect
import os

import keras
import numpy as np
from keras import tree

from gradkit import _checks, _keras_internals


def check_model(model, name="model"):
    """`model` if it is a `keras.Model`; TypeError in the house form otherwise."""
    if not isinstance(model, keras.Model):
        _checks.fail(name, "a keras.Model", model, TypeError)
    return model


def training_kwargs(model, training):
    """`{"training": training}` when `model.call` takes a `training` argument, else `{}`."""
    params = inspect.signature(model.call).parameters
    return {"training": training} if "training" in params else {}


def model_inputs(model):
    """The symbolic inputs of a Sequential/Functional model, or None for subclassed models."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    return list(inputs) if inputs else None


def input_names(model):
    inputs = model_inputs(model)
    return [getattr(t, "name", f"input_{i}") for i, t in enumerate(inputs or [])]


def check_x(model, x, *, name="x", require_float=True):
    """Validates model input data and returns it as numpy arrays in the structure given.

    Returns:
        `(x, n)`: `x` with every leaf a numpy array (floating leaves cast to the model input dtype),
        and the number of samples.

    Raises:
        TypeError: a string or path, symbolic tensors, non-numeric data, or integer inputs when
            `require_float` (integer images: the message shows the conversion).
        ValueError: empty data, leaves of different lengths, a wrong feature shape, NaN or inf.
    """
    if x is None:
        raise ValueError(f"`{name}` is required. Received: {name}=None")
    if isinstance(x, (str, bytes, os.PathLike)):
        raise TypeError(
            f"`{name}` must be an array of inputs, not a string or file path. Received: {name}={x!r} "
            "(load the data first, e.g. with np.load)"
        )
    if any(_keras_internals.is_symbolic(leaf) for leaf in tree.flatten(x)):
        raise TypeError(
            f"`{name}` must hold concrete arrays (numpy or backend tensors), not symbolic Keras "
            f"tensors such as `model.input`. Received: {name} of type "
            f"{type(tree.flatten(x)[0]).__name__}"
        )
    pairs, structure = _pairs(model, x, name)
    lengths = {a.shape[0] if a.ndim else -1 for a, _, _ in pairs}
    if len(lengths) != 1 or -1 in lengths or 0 in lengths:
        raise ValueError(
            f"`{name}` must be non-empty arrays with the same number of samples. "
            f"Received shapes: {[a.shape for a, _, _ in pairs]}"
        )
    casted = [_check_leaf(a, spec, label, name, require_float) for a, spec, label in pairs]
    if isinstance(structure, list):  # the dict's keys, in the model's input order
        return dict(zip(structure, casted)), lengths.pop()
    return (casted if structure == "list" else casted[0]), lengths.pop()


def _pairs(model, x, name):
    """`([(array, input spec or None, label)], structure)`: the leaves of `x` matched to the model's
    inputs; labels are the user's names (`x`, `x[1]`, a dict key), never auto-generated ones."""
    specs = model_inputs(model)
    if isinstance(x, dict) and specs:
        names = input_names(model)
        unknown = sorted(set(x) - set(names))
        if unknown:
            raise ValueError(f"`{name}` has keys {unknown} that are not model inputs {names}.")
        missing = [k for k in names if k not in x]
        if missing:
            raise ValueError(f"`{name}` lacks the model inputs {missing}.")
        return [(np.asarray(x[k]), spec, f"{name}[{k!r}]") for k, spec in zip(names, specs)], names
    given = list(x) if isinstance(x, (list, tuple)) else [x]
    if specs and len(given) != len(specs):
        hint = ""
        if len(specs) == 1:
            hint = f" (a list or tuple is read as one array per input: pass np.asarray({name}) for one input)"
        raise ValueError(
            f"`{name}` must have {len(specs)} input array(s), one per model input "
            f"{input_names(model)}. Received: {len(given)}{hint}"
        )
    several = isinstance(x, (list, tuple))
    labels = [f"{name}[{i}]" for i in range(len(given))] if several else [name]
    pairs = [
        (np.asarray(a), spec, label) for a, spec, label in zip(given, specs or [None] * len(given), labels)
    ]
    return pairs, ("list" if several else None)


def _check_leaf(arr, spec, label, name, require_float):
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"`{label}` must be numeric. Received: {label} of dtype {arr.dtype}")
    spec_dtype = str(getattr(spec, "dtype", None) or "float32")
    float_model = spec_dtype.startswith(("float", "bfloat"))
    if require_float and float_model and not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(
            f"`{label}` holds integers (dtype {arr.dtype}), but input gradients need a floating input. "
            f"Convert it first, e.g. {label} = {label}.astype('float32') / 255 for 8-bit images (then "
            "clip_values=(0, 1) and eps in those units)."
        )
    if require_float and not float_model:
        raise TypeError(
            f"Input gradients need a floating input, but the model's input for `{label}` takes {spec_dtype} "
            "ids: no gradient exists w.r.t. integer ids; for an Embedding model, differentiate at the "
            "embedding output (a model that takes the embeddings as input)."
        )
    if spec is not None:
        expected = tuple(spec.shape[1:])
        got = arr.shape[1:]
        if len(expected) != len(got) or any(e is not None and e != g for e, g in zip(expected, got)):
            raise ValueError(
                f"`{name}` must have feature shape {expected} for input {label!r}. "
                f"Received: {name}.shape={arr.shape}"
            )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"`{name}` contains NaN or inf (input {label!r}).")
        return arr.astype(spec_dtype if require_float else arr.dtype, copy=False)
    return arr


def output_names(model):
    """The names `output=` takes, one per entry of `model.outputs` and in that order.

    A Functional model built with a dict of outputs is named by the dict's keys (Keras orders dict outputs
    differently across versions, keras#20596, so a head is found by its key, never by its position);
    other models by the names of their output layers (`model.output_names`). Empty for subclassed models.
    """
    outputs = list(getattr(model, "outputs", None) or [])
    layer_names = list(getattr(model, "output_names", None) or [])
    structure = _keras_internals.output_structure(model)
    if isinstance(structure, dict) and all(not tree.is_nested(v) for v in structure.values()):
        by_tensor = {id(tensor): key for key, tensor in structure.items()}
        if all(id(t) in by_tensor for t in outputs):
            return [str(by_tensor[id(t)]) for t in outputs]
    return layer_names if len(layer_names) == len(outputs) else [f"output_{i}" for i in range(len(outputs))]


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
                f"The model has {len(outputs)} outputs {describe_outputs(model)}: pass `output=` (a name) "
                "to say which one the loss is computed on. Received: output=None"
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


def output_key(model, index):
    """Where `select_output` finds output `index` of `model` in what its call returns: the dict key of a
    dict output (found by name whatever order the dict comes in), else the index itself."""
    structure = _keras_internals.output_structure(model)
    if isinstance(structure, dict) and getattr(model, "outputs", None):
        return output_names(model)[index]
    return index


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
    """Size of the last axis of output `index` (the number of classes of a classifier); 0 if unknown.

    A subclassed model has no symbolic outputs: given checked input arrays `x`, its output shape is
    traced from one sample's shape with `model.compute_output_spec` (no real computation).
    """
    if getattr(model, "outputs", None):
        return int(model.outputs[index].shape[-1] or 0)
    if x is None:
        return 0
    cache = vars(model).setdefault("_gradkit_n_outputs", {})  # not through Keras' attribute tracking
    key = (index, repr(tree.map_structure(lambda a: (a.shape[1:], str(a.dtype)), x)))
    if key not in cache:
        specs = tree.map_structure(lambda a: keras.KerasTensor((1, *a.shape[1:]), dtype=str(a.dtype)), x)
        try:
            cache[key] = int(
                select_output(model.compute_output_spec(specs), output_key(model, index)).shape[-1] or 0
            )
        except Exception:  # a model Keras cannot trace symbolically: the loss alone checks the labels
            cache[key] = 0
    return cache[key]
