"""Which loss gradkit differentiates, and how it reads labels.

Weight gradients (`weight_gradients`, `gradient_norm`) use the loss exactly as `fit` does (`keras_reduced`,
plus the model's regularization losses); input gradients (`InputGradient`, the attacks) use the
per-sample loss summed over the batch (`attack_per_sample`). A loss is recognised by what
`keras.losses.get` resolves it to, never by its spelling (`resolve_loss`); under a float16 policy it is
scaled as `fit`'s `LossScaleOptimizer` scales it (`loss_scale`).

References:
    Micikevicius et al. (2018), "Mixed precision training", ICLR, https://arxiv.org/abs/1710.03740
    (loss scaling).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import tree

from gradkit.gradients._outputs import output_index, output_names

_KINDS = (
    (keras.losses.sparse_categorical_crossentropy, "sparse"),
    (keras.ops.sparse_categorical_crossentropy, "sparse"),
    (keras.losses.categorical_crossentropy, "categorical"),
    (keras.ops.categorical_crossentropy, "categorical"),
    (keras.losses.binary_crossentropy, "binary"),
    (keras.ops.binary_crossentropy, "binary"),
)
REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")  # the ones that average
_UNREDUCED = (None, "none")  # per-sample values, which `fit`'s compiled loss then averages over the batch
DEFAULT_LOSS_SCALE = 2.0**15  # LossScaleOptimizer's initial_scale


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """A resolved loss: the Keras per-sample function, its kind, whether it takes logits, its reduction."""

    fn: Callable[[Any, Any], Any]
    kind: str  # "sparse", "categorical", "binary" or "other"
    from_logits: bool
    name: str
    reduction: str = "sum_over_batch_size"
    label_smoothing: float = 0.0  # categorical and binary cross-entropy, as Keras applies it
    ignore_class: int | None = None  # sparse cross-entropy: rows of this label have no loss

    @property
    def is_classification(self):
        return self.kind != "other"


def resolve_loss(loss, model=None, output=None):
    """Resolves `loss` (or, when None, the loss `model` was compiled with) into a `LossSpec`.

    The kind is read from what `keras.losses.get` resolves `loss` to: every string Keras accepts
    (`"categorical_crossentropy"`, `"CategoricalCrossentropy"`, `"bce"`), a `keras.losses.Loss` class or
    instance, the Keras loss functions (also as `functools.partial(..., from_logits=True)`) and the
    `keras.ops` cross-entropies: `"CategoricalCrossentropy"`, `"categorical_crossentropy"`, the class, an
    instance and the function are the same loss. Any other callable is a loss of kind "other".

    Args:
        loss: None, a loss identifier Keras accepts, a `keras.losses.Loss` (class or instance, with a
            reduction that averages: "sum_over_batch_size", "mean" or "mean_with_sample_weight"), or a
            callable `fn(y_true, y_pred) -> per-sample losses`.
        model: the Keras model whose compiled loss is used when `loss` is None.
        output: name or index of the output whose loss is wanted, for models with several outputs.

    Raises:
        ValueError: `loss` is None and the model was not compiled with a loss; an unknown loss name; a
            reduction that does not average.
        TypeError: `loss` is of an unsupported type.
    """
    if loss is None:
        loss = _compiled_loss(model, output)
    if isinstance(loss, str) or isinstance(loss, dict) and _is_config(loss) or _is_loss_class(loss):
        loss = keras.losses.get(loss)
    if isinstance(loss, keras.losses.Loss):
        if loss.reduction not in REDUCTIONS + _UNREDUCED:
            raise ValueError(
                f"`loss` must have a reduction that averages, one of {REDUCTIONS}, as gradkit reduces "
                f"losses the way `fit` does with them. Received: loss with reduction={loss.reduction!r}"
            )
        inner = getattr(loss, "fn", None)
        config = loss.get_config()
        reduction = "sum_over_batch_size" if loss.reduction in _UNREDUCED else loss.reduction
        return LossSpec(
            loss.call,
            _kind(inner),
            bool(config.get("from_logits", False)),
            _name(inner or loss),
            reduction,
            **_options(config),
        )
    if callable(loss):
        inner, keywords = (loss.func, loss.keywords) if isinstance(loss, functools.partial) else (loss, {})
        kind, from_logits = _kind(inner), bool(keywords.get("from_logits", False))
        return LossSpec(loss, kind, from_logits, _name(inner), **_options(keywords))
    raise TypeError(
        "`loss` must be None, a loss name, a keras.losses.Loss or a callable. "
        f"Received: loss={loss!r} of type {type(loss).__name__}"
    )


def _compiled_loss(model, output):
    loss = getattr(model, "loss", None) if model is not None else None
    if loss is None:
        raise ValueError(
            "The model is not compiled with a loss: pass `loss=` (for example "
            "loss='sparse_categorical_crossentropy') or call `model.compile(loss=...)` first. "
            "Received: loss=None"
        )
    if isinstance(loss, dict) and not _is_config(loss):
        index = output_index(model, output)
        lists = (output_names(model), list(getattr(model, "output_names", None) or []))
        names = [n[index] for n in lists if index < len(n)] or [output]
        key = next((name for name in names if name in loss), names[0])  # a dict key, else the layer's name
        if key not in loss:
            raise ValueError(f"The compiled loss has no entry for output {key!r}: {list(loss)}")
        return loss[key]
    if isinstance(loss, (list, tuple)):
        return loss[output_index(model, output)]
    return loss


def _options(config):
    """The label options of a Keras cross-entropy: `label_smoothing` (a float) and `ignore_class`."""
    ignore = config.get("ignore_class")
    return {
        "label_smoothing": float(config.get("label_smoothing") or 0.0),
        "ignore_class": None if ignore is None else int(ignore),
    }


def _is_config(loss):
    return "class_name" in loss and "config" in loss


def _is_loss_class(loss):
    return isinstance(loss, type) and issubclass(loss, keras.losses.Loss)


def _kind(fn):
    return next((kind for known, kind in _KINDS if fn is known), "other")


def _name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


def keras_per_sample(spec, y, y_pred):
    """Per-sample loss of shape (batch,) exactly as the Keras loss computes it (the `fit` path)."""
    values = spec.fn(y, keras.ops.cast(y_pred, "float32"))
    values = keras.ops.cast(values, "float32")
    if len(values.shape) > 1:
        values = keras.ops.mean(values, axis=tuple(range(1, len(values.shape))))
    return values


def keras_reduced(spec, y, y_pred, sample_weight):
    """The loss `fit` minimizes for one output: sample-weighted per-sample losses reduced by `spec.reduction`
    (divided by the batch size, or by the sum of the weights for "mean_with_sample_weight")."""
    if spec.ignore_class is not None:  # Keras masks these rows and averages over the others
        kept = keras.ops.cast(keras.ops.reshape(y, (-1,)) != spec.ignore_class, "float32")
        total = keras.ops.sum(keras_per_sample(spec, y, y_pred) * sample_weight * kept)
        count = keras.ops.sum(sample_weight * kept if spec.reduction == "mean_with_sample_weight" else kept)
        return keras.ops.divide_no_nan(total, count)
    total = keras.ops.sum(keras_per_sample(spec, y, y_pred) * sample_weight)
    if spec.reduction == "mean_with_sample_weight":
        return keras.ops.divide_no_nan(total, keras.ops.sum(sample_weight))
    return total / keras.ops.cast(keras.ops.shape(sample_weight)[0], "float32")


def attack_per_sample(spec, ids_or_y, out, out_is_logits):
    """Per-sample loss of shape (batch,) for input gradients: cross-entropy from logits if known, with
    the loss's `label_smoothing` and `ignore_class` applied as Keras applies them (an ignored row's loss
    is 0). Summed over the batch by the callers, so a sample's gradient does not depend on its batch;
    for a model ending in a softmax `out` are the logits before it (`gradients._logits`)."""
    out = keras.ops.cast(out, "float32")
    smoothing = spec.label_smoothing
    if spec.kind in ("sparse", "categorical") and smoothing:
        y = keras.ops.one_hot(ids_or_y, out.shape[-1]) * (1.0 - smoothing) + smoothing / out.shape[-1]
        return keras.ops.categorical_crossentropy(y, out, from_logits=out_is_logits)
    if spec.kind in ("sparse", "categorical"):
        if spec.ignore_class is None:
            return keras.ops.sparse_categorical_crossentropy(ids_or_y, out, from_logits=out_is_logits)
        kept = ids_or_y != spec.ignore_class
        ids = keras.ops.where(kept, ids_or_y, keras.ops.zeros_like(ids_or_y))
        values = keras.ops.sparse_categorical_crossentropy(ids, out, from_logits=out_is_logits)
        return values * keras.ops.cast(kept, "float32")
    if spec.kind == "binary":
        y = (
            keras.ops.cast(keras.ops.reshape(ids_or_y, (-1, 1)), "float32") * (1.0 - smoothing)
            + 0.5 * smoothing
        )
        values = keras.ops.binary_crossentropy(y, out, from_logits=out_is_logits)
        return keras.ops.mean(values, axis=-1)
    return keras_per_sample(spec, ids_or_y, out)


def check_attack_loss(spec):
    """Raises ValueError for a Keras cross-entropy with `label_smoothing` or `ignore_class`, which an
    attack's "ce" objective (the plain cross-entropy of the hard labels) would silently drop."""
    if spec.label_smoothing or spec.ignore_class is not None:
        raise ValueError(
            "`loss` must be a cross-entropy the attacks maximize as it is (the plain cross-entropy of the "
            f"hard labels). Received: loss {spec.name!r} with label_smoothing={spec.label_smoothing}, "
            f"ignore_class={spec.ignore_class} (pass loss='ce', 'dlr' or 'margin' to attack without them)"
        )


def loss_scale(models):
    """The factor `fit` multiplies the loss by before differentiating, for the largest of `models`.

    A model compiled with a `LossScaleOptimizer` (Keras wraps the optimizer in one under the
    "mixed_float16" policy) gives its current scale (`optimizer.scale_loss(1)`); any other model that
    computes in float16 gives `DEFAULT_LOSS_SCALE` (2**15, the optimizer's initial scale); others 1.0.
    The loss is multiplied by it before differentiating and the gradient divided by it (`unscaled`), so
    small gradients do not underflow in float16.
    """
    scales = [1.0]
    for model in models:
        optimizer = getattr(model, "optimizer", None)
        scale = float(keras.ops.convert_to_numpy(optimizer.scale_loss(1.0))) if optimizer is not None else 1.0
        scales.append(scale if scale > 1.0 or not _computes_float16(model) else DEFAULT_LOSS_SCALE)
    return max(scales)


def _computes_float16(model):
    pending = [model]
    while pending:
        layer = pending.pop()
        if getattr(layer, "compute_dtype", None) == "float16":
            return True
        pending.extend(getattr(layer, "layers", None) or [])
    return False


def unscaled(grad_fn, scale):
    """`grad_fn(scale) / scale` (numpy leaves), the scale halved while the gradient overflows in float16,
    as the `LossScaleOptimizer`'s dynamic scale does (down to 1)."""
    while True:
        grads = grad_fn(scale)
        if scale <= 1.0 or all(np.all(np.isfinite(g)) for g in tree.flatten(grads)):
            break
        scale = max(scale / 2.0, 1.0)
    return grads if scale == 1.0 else tree.map_structure(lambda g: g / np.asarray(scale, g.dtype), grads)
