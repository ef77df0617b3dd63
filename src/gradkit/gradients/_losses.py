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
