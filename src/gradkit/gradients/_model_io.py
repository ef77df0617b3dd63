"""Checks and helpers for what a model takes: its input arrays and its mode flag (its outputs: `_outputs`).

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


def jit_compiled(models):
    """True when every model's Keras `jit_compile` is True (set by `compile(jit_compile=...)`; "auto"
    resolves to True on TensorFlow where a GPU is and the layers support XLA, False on a CPU-only
    machine): TensorFlow then compiles an attack step whole under XLA (`backend.compile_step`)."""
    return all(getattr(m, "jit_compile", False) is True for m in models)


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
