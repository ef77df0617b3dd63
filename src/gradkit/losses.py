"""Which loss gradkit differentiates, and how it reads labels.

Two uses, two rules:

- Weight gradients (`weight_gradients`, `gradient_norm`) use the loss exactly as `fit` does: the Keras
  loss function on the model's outputs, reduced the Keras way (sum of sample-weighted per-sample losses
  divided by the batch size), plus the model's regularization losses.
- Input gradients (`InputGradient`, the attacks) use the per-sample loss summed over the batch, so a
  sample's gradient does not depend on the batch it came in. For cross-entropy on a model that ends in
  a softmax, the loss is computed from the logits before the softmax: a saturated float32 softmax
  otherwise gives exactly zero gradients on JAX and PyTorch (TensorFlow recovers the logits itself).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

_CLASSIFICATION = {
    "sparse_categorical_crossentropy": "sparse",
    "categorical_crossentropy": "categorical",
    "binary_crossentropy": "binary",
}


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """A resolved loss: the Keras per-sample function, its kind and whether it takes logits."""

    fn: Callable[[Any, Any], Any]
    kind: str  # "sparse", "categorical", "binary" or "other"
    from_logits: bool
    name: str

    @property
    def is_classification(self):
        return self.kind != "other"


def resolve_loss(loss, model=None, output=None):
    """Resolves `loss` (or, when None, the loss `model` was compiled with) into a `LossSpec`.

    Args:
        loss: None, a loss name (`"sparse_categorical_crossentropy"`), a `keras.losses.Loss`, or a
            callable `fn(y_true, y_pred) -> per-sample losses`.
        model: the Keras model whose compiled loss is used when `loss` is None.
        output: name or index of the output whose loss is wanted, for models with several outputs.

    Raises:
        ValueError: `loss` is None and the model was not compiled with a loss.
        TypeError: `loss` is of an unsupported type.
    """
    if loss is None:
        loss = getattr(model, "loss", None) if model is not None else None
        if loss is None:
            raise ValueError(
                "The model is not compiled with a loss: pass `loss=` (for example "
                "loss='sparse_categorical_crossentropy') or call `model.compile(loss=...)` first. "
                "Received: loss=None"
            )
        if isinstance(loss, dict):
            names = list(getattr(model, "output_names", []))
            key = output if isinstance(output, str) else names[output or 0]
            if key not in loss:
                raise ValueError(f"The compiled loss has no entry for output {key!r}: {list(loss)}")
            loss = loss[key]
        elif isinstance(loss, (list, tuple)):
            loss = loss[output or 0]
    if isinstance(loss, str):
        fn = keras.losses.get(loss)
        name = getattr(fn, "__name__", loss)
        return LossSpec(fn, _CLASSIFICATION.get(name, "other"), False, name)
    if isinstance(loss, keras.losses.Loss):
        reduction = getattr(loss, "reduction", "sum_over_batch_size")
        if reduction not in (None, "sum_over_batch_size"):
            raise ValueError(
                "gradkit reduces losses the default Keras way (sum of weighted per-sample losses / batch "
                f'size); `loss` has reduction={reduction!r}. Use reduction="sum_over_batch_size".'
            )
        inner = getattr(loss, "fn", None)
        name = getattr(inner, "__name__", type(loss).__name__)
        from_logits = bool(loss.get_config().get("from_logits", False))
        return LossSpec(loss.call, _CLASSIFICATION.get(name, "other"), from_logits, name)
    if callable(loss):
        name = getattr(loss, "__name__", type(loss).__name__)
        return LossSpec(loss, _CLASSIFICATION.get(name, "other"), False, name)
    raise TypeError(
        "`loss` must be None, a loss name, a keras.losses.Loss or a callable. "
        f"Received: loss={loss!r} of type {type(loss).__name__}"
    )


def check_labels(y, n, n_classes, spec, name="y"):
    """Validates labels for `spec` and returns them in canonical form.

    Classification losses take class ids `(n,)` (or `(n, 1)`) or one-hot rows `(n, n_classes)`; both
    are returned as int32 ids of shape `(n,)`. Soft probability vectors are rejected: the cross-entropy
    of a distribution with itself has a zero gradient, so an attack would silently do nothing. Other
    losses get a float32 array, unchanged in shape.

    Raises:
        ValueError: wrong length, soft or out-of-range labels, NaN or inf.
        TypeError: `y` is not array-like.
    """
    arr = np.asarray(y)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"`{name}` must be a numeric array. Received: {name} of dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[0] != n:
        raise ValueError(f"`{name}` must have one row per sample ({n}). Received: {name}.shape={arr.shape}")
    if not np.all(np.isfinite(arr.astype(np.float64))):
        raise ValueError(f"`{name}` contains NaN or inf.")
    if not spec.is_classification:
        return arr.astype(np.float32)
    if spec.kind == "binary":
        if arr.reshape(n, -1).shape[1] != 1:
            raise ValueError(
                f"Binary cross-entropy labels `{name}` must be one 0/1 label per sample, shape (n,) or "
                f"(n, 1); multi-label targets are not supported. Received: {name}.shape={arr.shape}"
            )
        if not np.all((arr == 0) | (arr == 1)):
            raise ValueError(f"Binary labels `{name}` must be 0 or 1.")
        return arr.reshape(n, -1).astype(np.int32)[:, 0]
    if arr.ndim == 2 and arr.shape[1] == n_classes and n_classes > 1:
        ones = arr == 1
        if not (np.all(ones | (arr == 0)) and np.all(ones.sum(axis=1) == 1)):
            raise ValueError(
                f"`{name}` looks like soft probability vectors: labels must be class ids of shape "
                f"(n,) or one-hot rows of shape (n, {n_classes}). The cross-entropy of a "
                "distribution with itself has zero gradient, so attacks would do nothing."
            )
        return arr.argmax(axis=1).astype(np.int32)
    flat = arr.reshape(n, -1)
    if flat.shape[1] != 1:
        raise ValueError(
            f"`{name}` must hold class ids of shape (n,) or one-hot rows of shape (n, {n_classes}). "
            f"Received: {name}.shape={arr.shape}"
        )
    fractional = np.flatnonzero(flat[:, 0] != np.round(flat[:, 0]))
    if fractional.size:
        i = int(fractional[0])
        raise ValueError(
            f"`{name}` must hold integer class ids. Received: {fractional.size} non-integer value(s), "
            f"the first {name}[{i}]={flat[i, 0]!r}"
        )
    ids = flat[:, 0].astype(np.int64)
    if ids.min() < 0 or (n_classes and ids.max() >= n_classes):  # n_classes 0: unknown (subclassed)
        raise ValueError(
            f"`{name}` holds class ids outside [0, {n_classes - 1}]. "
            f"Received: min={ids.min()}, max={ids.max()}"
        )
    return ids.astype(np.int32)


def labels_for_loss(ids, spec, n_classes):
    """Canonical ids -> the label form the Keras loss function expects (ids, one-hot, 0/1 column)."""
    if spec.kind == "categorical":
        return np.eye(n_classes, dtype=np.float32)[ids]
    if spec.kind == "binary":
        return ids.astype(np.float32)[:, None]
    return ids


def keras_per_sample(spec, y, y_pred):
    """Per-sample loss of shape (batch,) exactly as the Keras loss computes it (the `fit` path)."""
    values = spec.fn(y, keras.ops.cast(y_pred, "float32"))
    values = keras.ops.cast(values, "float32")
    if len(values.shape) > 1:
        values = keras.ops.mean(values, axis=tuple(range(1, len(values.shape))))
    return values


def attack_per_sample(spec, ids_or_y, out, out_is_logits):
    """Per-sample loss of shape (batch,) for input gradients: cross-entropy from logits if known."""
    out = keras.ops.cast(out, "float32")
    if spec.kind in ("sparse", "categorical"):
        return keras.ops.sparse_categorical_crossentropy(ids_or_y, out, from_logits=out_is_logits)
    if spec.kind == "binary":
        y = keras.ops.cast(keras.ops.reshape(ids_or_y, (-1, 1)), "float32")
        values = keras.ops.binary_crossentropy(y, out, from_logits=out_is_logits)
        return keras.ops.mean(values, axis=-1)
    return keras_per_sample(spec, ids_or_y, out)


def _activation_name(layer):
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
        history = getattr(outputs[index], "_keras_history", None)
        layer = history[0] if history else None
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
    if target is None or _activation_name(target) not in ("softmax", "sigmoid"):
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
