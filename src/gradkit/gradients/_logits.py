"""Logits recovered from models whose output applies a softmax or sigmoid, wherever the graph shows it.

A saturated float32 softmax gives exactly zero cross-entropy gradients on JAX and PyTorch (TensorFlow's
Keras recovers the logits itself), so gradkit differentiates the cross-entropy of the logits: the model
is rebuilt without its final softmax (sigmoid) (`logits_model`). Where that operation cannot be found,
`warn_probabilities` says that the gradient goes through the probabilities.
"""

import warnings

import keras
import numpy as np

from gradkit import _keras_internals

_FUNCTIONS = (
    (keras.activations.softmax, "softmax"),
    (keras.ops.softmax, "softmax"),
    (keras.activations.sigmoid, "sigmoid"),
    (keras.ops.sigmoid, "sigmoid"),
)
_OPS = {"Softmax": "softmax", "Sigmoid": "sigmoid"}  # keras.ops nodes of a Functional graph
_WARNED = "_gradkit_warned_probabilities"
_PROBED = "_gradkit_probed_activation"
_WRAPPER = getattr(keras.layers, "TorchModuleWrapper", None)


def _is_wrapped_module(layer):
    return _WRAPPER is not None and isinstance(layer, _WRAPPER)


def _probed_activation(layer):
    """The name "softmax" when a wrapped torch module's outputs are probabilities, else None (cached).

    Its `forward` is code gradkit cannot read, so the module is run (inference mode) on zeros and three
    uniform draws in [0, 1) of its input's shape: rows of C >= 2 non-negative scores summing to 1 come
    from a softmax (logits do so by chance only on a set of measure zero).
    """
    cache = vars(layer)
    if _PROBED not in cache:
        cache[_PROBED] = None
        try:
            shape = tuple(layer.input.shape[1:])
        except (AttributeError, ValueError, TypeError):  # not called in a graph: no input shape known
            return None
        if all(isinstance(d, int) for d in shape):
            probe = np.random.RandomState(0).rand(4, *shape).astype("float32")
            probe[0] = 0.0
            try:
                out = keras.ops.convert_to_numpy(layer(keras.ops.convert_to_tensor(probe), training=False))
            except Exception:  # noqa: BLE001 - a module that takes no float inputs: nothing to read
                return None
            if out.ndim == 2 and out.shape[1] >= 2 and np.all(np.isfinite(out)) and out.min() >= 0:
                if np.allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-4):
                    cache[_PROBED] = "softmax"
    return cache[_PROBED]


def _function_name(fn):
    known = next((name for f, name in _FUNCTIONS if fn is f), None)
    return known or getattr(fn, "__name__", None)


def _activation_only(layer):
    """True for an operation that only applies an activation (no weights): it is bypassed, not rebuilt."""
    if isinstance(layer, (keras.layers.Softmax, keras.layers.Activation, keras.layers.Lambda)):
        return True
    return not isinstance(layer, keras.layers.Layer) and type(layer).__name__ in _OPS


def activation_name(layer):
    """The name of the activation an output operation applies last ("softmax", "sigmoid", ...), or None.

    Reads `keras.layers.Softmax`, a `Lambda` wrapping a known function, a `keras.ops` node of a
    Functional graph, the `activation` of any layer that has one (`Dense`, `Conv2D`, `Activation`), and
    for a wrapped torch module whether its outputs are probabilities (`_probed_activation`).
    """
    if _is_wrapped_module(layer):
        return _probed_activation(layer)
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    if isinstance(layer, keras.layers.Lambda):
        return _function_name(layer.function)
    if layer is not None and not isinstance(layer, keras.layers.Layer):
        return _OPS.get(type(layer).__name__)
    return _function_name(getattr(layer, "activation", None))


def output_layer(model, index=0):
    """The layer (or `keras.ops` operation) that produces output `index` of a Sequential or Functional
    model, else None; a nested Sequential or Functional model there is looked into (its single output)."""
    outputs = getattr(model, "outputs", None)
    if isinstance(model, keras.Sequential):
        layer = model.layers[-1] if model.layers else None
    elif not outputs or index >= len(outputs):
        return None
    else:
        layer = _keras_internals.producing_layer(outputs[index])
    if isinstance(layer, keras.Model) and len(getattr(layer, "outputs", None) or []) == 1:
        return output_layer(layer, 0)
    return layer


class _PassThrough(keras.layers.Layer):
    """Returns its first input unchanged, whatever else the replaced operation was called with."""

    def call(self, inputs, *args, **kwargs):
        return inputs

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape


def logits_model(model, index=0):
    """A rebuilt `model` whose output `index` stops before its final softmax (or sigmoid).

    The final softmax (sigmoid) is found however it is written: a layer's `activation`
    (`Dense(3, activation="softmax")`), `Activation("softmax")`, `Activation(keras.activations.softmax)`,
    `keras.layers.Softmax()`, a `Lambda` wrapping `keras.activations.softmax` or `keras.ops.softmax`,
    `keras.ops.softmax` applied to a Functional model's tensor, each also inside a nested Sequential or
    Functional model; not in a `Lambda` of other code, a custom layer, a subclassed model or a wrapped
    torch module's `forward`. Every other layer is shared with `model` (so the variables keep their
    order), and `rebuilt.stateless_call(values of model)` gives the logits of `model`. Returns
    `(rebuilt, True)`, or `(model, False)` when the output is not a softmax/sigmoid or the model cannot
    be rebuilt (subclassed models, layers Keras cannot re-run).
    """
    target = output_layer(model, index)
    if target is None or _is_wrapped_module(target) or activation_name(target) not in ("softmax", "sigmoid"):
        return model, False  # a wrapped torch module's softmax is inside its forward: not removable

    def clone_layer(layer):
        if layer is not target:
            return layer  # shared: same variables, same order
        if _activation_only(layer):
            return _PassThrough(name=f"{layer.name}_logits")
        config = layer.get_config()
        config["activation"] = "linear"
        return layer.__class__.from_config(config)

    try:  # an uncompiled view first: clone_model recompiles a compiled model and fails on loss classes
        view = keras.Model(model.inputs, model.outputs, name=model.name)
        with _keras_internals.tensorflow_unasked():  # get_config would import TensorFlow on any backend
            clone = keras.models.clone_model(view, clone_function=clone_layer, recursive=True)
    except Exception:  # noqa: BLE001 - any rebuild failure falls back to the probabilities
        return model, False
    same = all(
        len(a) == len(b) and all(tuple(u.shape) == tuple(v.shape) for u, v in zip(a, b))
        for a, b in (
            (model.trainable_variables, clone.trainable_variables),
            (model.non_trainable_variables, clone.non_trainable_variables),
        )
    )
    return (clone, True) if same else (model, False)


def classifier_forward(model, index, activation):
    """`(model to run, outputs are logits)` for a cross-entropy on probabilities from `activation`.

    The logits model when the output's final `activation` can be removed. Otherwise the model itself
    (its outputs), after `warn_probabilities` when the output comes from code gradkit cannot read (a
    subclassed model, a `Lambda`, a custom layer) or its softmax could not be removed; a Keras layer
    that applies no such activation (a linear `Dense`) is taken as it is, silently.
    """
    layer = output_layer(model, index)
    found = layer is not None and activation_name(layer) == activation
    if found:
        clone, ok = logits_model(model, index)
        if ok:
            return clone, True
    if found or is_opaque(layer):
        warn_probabilities(model, index, layer, activation)
    return model, False


def is_opaque(layer):
    """True where gradkit cannot read what the output operation computes (subclassed, Lambda, custom, a
    wrapped torch module)."""
    if layer is None or isinstance(layer, keras.layers.Lambda) or _is_wrapped_module(layer):
        return True
    return not type(layer).__module__.startswith("keras.")


def warn_probabilities(model, index, layer, activation):
    """Warns once per model and output that input gradients go through probabilities (may vanish)."""
    warned = vars(model).setdefault(_WARNED, set())  # not through Keras' attribute tracking
    if index in warned:
        return
    warned.add(index)
    name = getattr(layer, "name", "")
    where = "a subclassed model" if layer is None else f"{type(layer).__name__} {name!r}"
    fix = (
        "Return logits from the module's forward (without its final softmax)."
        if _is_wrapped_module(layer)
        else f"Write the {activation} as Dense(..., activation={activation!r}), Activation({activation!r}) "
        "or keras.layers.Softmax(), or output logits and compile the loss with from_logits=True."
    )
    warnings.warn(
        f"gradkit cannot recover the logits of model {model.name!r} (output {index} comes from {where}, "
        f"where it finds no {activation} it can remove): input gradients are taken through the "
        "probabilities and may vanish (exactly zero) where they saturate in float32, which makes a "
        f"model look robust. {fix}",
        stacklevel=3,
    )
