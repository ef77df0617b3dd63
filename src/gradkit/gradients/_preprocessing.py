"""Pixel space over a normalized model: the preprocessing composed in front of the model, once per model.

`preprocessing=(mean, std)` (or a callable / Keras layer) makes an attack's threat model, its clip values
and the returned points live in the units of the data (pixels), while the model sees `pre(x)`: the
wrapper `keras.Model(inputs, model(pre(inputs)))` is cached on the model (`preprocessed`), so the
compiled gradient functions cached on it are traced once, and gradients flow through `pre`.
"""

import keras
import numpy as np

from gradkit import _checks
from gradkit.gradients._ensemble import WeightedEnsemble, as_ensemble
from gradkit.gradients._model_io import model_inputs

_CACHE = "_gradkit_preprocessed"


class Affine:
    """The per-feature affine map `(x - mean) / std` of `preprocessing=(mean, std)`, float32 arrays
    broadcastable to one input's shape (a `(C,)` vector is the last axis: channels_last)."""

    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def key(self):
        return ("affine", self.mean.shape, self.mean.tobytes(), self.std.shape, self.std.tobytes())

    def __repr__(self):
        return f"Affine(mean={self.mean.tolist()}, std={self.std.tolist()})"


class Standardize(keras.layers.Layer):
    """`(x - mean) / std` in float32, with `mean` and `std` as non-trainable weights (so a model digest,
    and a resumed evaluation's state, sees them)."""

    def __init__(self, mean, std, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self._values = (np.asarray(mean, np.float32), np.asarray(std, np.float32))

    def build(self, input_shape):
        for name, value in zip(("mean", "std"), self._values):
            init = lambda shape, dtype=None, v=value: keras.ops.convert_to_tensor(v, dtype)  # noqa: E731
            setattr(
                self, name, self.add_weight(shape=value.shape, initializer=init, trainable=False, name=name)
            )

    def call(self, x):
        return (keras.ops.cast(x, "float32") - self.mean) / self.std

    def compute_output_shape(self, input_shape):
        return input_shape


def check_preprocessing(preprocessing, name="preprocessing"):
    """None, an `Affine` for a pair `(mean, std)` (finite floats or arrays, std > 0 everywhere), or the
    callable (a Keras layer or a function on tensors) itself; TypeError / ValueError naming `name`."""
    if preprocessing is None or isinstance(preprocessing, Affine):
        return preprocessing
    if callable(preprocessing):
        return preprocessing
    expected = "None, a pair (mean, std) of floats or arrays, a Keras layer or a callable on tensors"
    if not isinstance(preprocessing, (tuple, list)) or len(preprocessing) != 2:
        _checks.fail(name, expected, preprocessing, TypeError)
    try:
        mean, std = (np.asarray(v, np.float32) for v in preprocessing)
    except (TypeError, ValueError):
        _checks.fail(name, expected, preprocessing, TypeError)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        _checks.fail(name, "a pair (mean, std) of finite values", preprocessing)
    if np.any(std <= 0):
        _checks.fail(name, "a pair (mean, std) with std > 0 everywhere", preprocessing)
    return Affine(mean, std)


def _input_shape(model, shape):
    """One row's shape of the wrapper's input: `shape` (the data's) or the model's one input's."""
    inputs = model_inputs(model)
    if inputs is not None and len(inputs) != 1 or inputs is None and shape is None:
        count = "no symbolic inputs (a subclassed model)" if inputs is None else f"{len(inputs)} inputs"
        raise ValueError(
            "`preprocessing` needs a model with one input (a subclassed one: with the data's shape). "
            f"Received: model {model.name!r} with {count}"
        )
    return tuple(inputs[0].shape[1:]) if shape is None else shape


def _layer(pre, shape):
    if not isinstance(pre, Affine):
        return pre
    for what, a in (("mean", pre.mean), ("std", pre.std)):
        try:
            np.broadcast_shapes(a.shape, tuple(1 if d is None else d for d in shape))
        except ValueError:
            _checks.fail("preprocessing", f"a {what} broadcastable to the input shape {shape}", a.shape)
    return Standardize(pre.mean, pre.std, name="preprocessing")


def _wrap(model, pre, shape):
    """`keras.Model(inputs, model(pre(inputs)))`, compiled with the model's loss where it has one; the
    inputs of one row of `shape` (the data's: a callable may resize), else of the model's input shape."""
    shape = _input_shape(model, shape)
    inputs = keras.Input(shape, dtype="float32")
    wrapper = keras.Model(inputs, model(_layer(pre, shape)(inputs)), name=f"{model.name}_preprocessed")
    if getattr(model, "loss", None):  # the compiled loss the attacks read (loss=None)
        wrapper.compile(loss=model.loss, jit_compile=getattr(model, "jit_compile", False) is True)
    return wrapper


def row_shape(x):
    """One row's shape of `x` (one array), the `shape` a callable preprocessing takes; None for several
    inputs (a list, tuple or dict: the model's own input shape)."""
    return None if isinstance(x, (list, tuple, dict)) or x is None else tuple(np.shape(x)[1:])


def _key(pre, shape):
    return (*(pre.key() if isinstance(pre, Affine) else ("callable", id(pre))), shape)


def _shape_for(model, pre, shape):
    """The wrapper's row shape: an affine map keeps a model's fully known input shape (the data is
    checked against it); a callable takes the data's (`shape`), or the model's where none is given."""
    inputs = model_inputs(model)
    own = tuple(inputs[0].shape[1:]) if inputs and len(inputs) == 1 else None
    if isinstance(pre, Affine) and own is not None and None not in own:
        return own
    return own if shape is None else tuple(int(d) for d in shape)


def preprocessed(model, preprocessing, shape=None):
    """`model` with `preprocessing` (checked by `check_preprocessing`) applied to its input first.

    `shape` is one row's shape of the data a callable takes (a preprocessor that resizes: the data's,
    not the model's; None: the model's input shape); an affine `(mean, std)` keeps the model's.

    A Keras model becomes the Functional wrapper `keras.Model(x, model(pre(x)))`; an ensemble (or a
    boosting estimator's `as_ensemble()`) the ensemble of its wrapped members, with the same weights.
    Built once per `(model, preprocessing)` and kept on the model (the entry holds a callable, so its
    id stays its own), and again after the model is compiled with another loss. None: `model` itself.

    Raises:
        ValueError: a model without one symbolic input (subclassed, or several inputs), or a `(mean,
            std)` not broadcastable to its input shape.
    """
    pre = check_preprocessing(preprocessing)
    if pre is None:
        return model
    owner = model if isinstance(model, keras.Model) else as_ensemble(model)
    cache = vars(owner).setdefault(_CACHE, {})
    loss = None if isinstance(owner, WeightedEnsemble) else getattr(owner, "loss", None)
    ensemble = isinstance(owner, WeightedEnsemble)
    members = [preprocessed(m, pre, shape) for m in owner.models] if ensemble else None
    shape = None if ensemble else _shape_for(owner, pre, shape)
    entry = cache.get(_key(pre, shape))
    stale = entry is None or entry[1] is not loss  # a member compiled again: its wrapper is new
    if stale or ensemble and any(a is not b for a, b in zip(entry[0].models, members)):
        if ensemble:
            built = WeightedEnsemble(members, owner.weights, normalize_gradients=owner.normalize_gradients)
        else:
            built = _wrap(owner, pre, shape)
            vars(built)[_CACHE + "_of"] = (owner, pre)  # `unwrapped` reads it (not tracked by Keras)
        cache[_key(pre, shape)] = entry = (built, loss, pre)
    return entry[0]


def unwrapped(model):
    """`(inner model, preprocessing)` of a model `preprocessed` built, else `(model, None)`."""
    return vars(model).get(_CACHE + "_of", (model, None))


def affine_of(preprocessing, model=None):
    """`(inner model, (mean, std))`: the model a `preprocessed` wrapper (or `model` itself) wraps, and the
    float32 arrays of its affine preprocessing (or of `preprocessing`), None where there is none;
    ValueError for a callable, which certificates cannot fold into their input set, or for both a
    wrapper and `preprocessing`."""
    model, pre = unwrapped(model) if model is not None else (None, None)
    if pre is not None and preprocessing is not None:
        raise ValueError(
            "`preprocessing` must be None for a model that already applies one (built by "
            f"gradkit.gradients.preprocessed). Received: preprocessing={preprocessing!r}"
        )
    pre = check_preprocessing(preprocessing if pre is None else pre)
    if pre is None:
        return model, None
    if not isinstance(pre, Affine):
        raise ValueError(
            "`preprocessing` must be None or a pair (mean, std) here: a callable cannot be folded into the "
            "certified input set. Received: preprocessing="
            f"{type(pre).__name__} (put it inside the model's layers instead)"
        )
    return model, (pre.mean, pre.std)
