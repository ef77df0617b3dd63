"""Logits recovered from models whose output layer applies a softmax or sigmoid.

A saturated float32 softmax gives exactly zero cross-entropy gradients on JAX and PyTorch (TensorFlow's
Keras recovers the logits itself), so gradkit differentiates the cross-entropy of the logits: it clones the
model with its final activation removed; the clone shares the variable layout, so the original's values
drive it through `stateless_call`.
"""

import keras

from gradkit import _keras_internals


def activation_name(layer):
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    activation = getattr(layer, "activation", None)
    return getattr(activation, "__name__", None)


def output_layer(model, index=0):
    """The layer that produces output `index` of a Sequential or Functional model, else None; a
    nested Sequential or Functional model there is looked into (its single output)."""
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


def logits_model(model, index=0):
    """A clone of `model` whose output `index` stops before its final softmax (or sigmoid).

    The clone has the same variables in the same order, so `clone.stateless_call(values of model)`
    gives the logits of `model`. Returns `(clone, True)`, or `(model, False)` when the output is not
    a softmax/sigmoid or the model cannot be cloned (subclassed models).
    """
    target = output_layer(model, index)
    if target is None or activation_name(target) not in ("softmax", "sigmoid"):
        return model, False

    def clone_layer(layer):
        if layer is not target:
            return layer.__class__.from_config(layer.get_config())
        if isinstance(layer, (keras.layers.Softmax, keras.layers.Activation)):
            return keras.layers.Identity(name=layer.name)
        config = layer.get_config()
        config["activation"] = "linear"
        return layer.__class__.from_config(config)

    try:
        clone = keras.models.clone_model(model, clone_function=clone_layer, recursive=True)
    except Exception:  # noqa: BLE001 - any clone failure falls back to the probabilities
        return model, False
    same = all(
        len(a) == len(b) and all(tuple(u.shape) == tuple(v.shape) for u, v in zip(a, b))
        for a, b in (
            (model.trainable_variables, clone.trainable_variables),
            (model.non_trainable_variables, clone.non_trainable_variables),
        )
    )
    return (clone, True) if same else (model, False)
