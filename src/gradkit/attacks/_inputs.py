"""Several inputs as one flat array: what lets every attack and `evaluate` attack a model of several inputs.

A model of inputs `x_1, ..., x_k` (a list in `model.inputs` order, or a dict keyed by input name) is
attacked as the model of one row `(n, d_1 + ... + d_k)` that cuts the row back into its inputs: a
functional `keras.Model` sharing the model's layers (its gradient is the model's, input by input). The
inputs not named in `attack_inputs` are held fixed by the mask (0 on their features), each attacked
input keeps its own clip values and mask, and the result is cut back into the user's structure. The
norms are then taken over the attacked features together: Linf is each input's own ball, L2 and L1 one
joint ball (per-input eps, a per-feature budget, exists in Linf only).
"""

import math

import keras
import numpy as np

from gradkit import _checks
from gradkit.gradients import cached, check_x, input_names

_WIDE = float(np.finfo(np.float32).max)  # the bound of an input without clip values


def is_several(model, x):
    """Whether `x` is a list, tuple or dict of arrays for a Keras model of several inputs.

    Args:
        model: any object; only a `keras.Model` with more than one input can be True.
        x: any object.

    Returns:
        bool: True when the attacks take `x` through `FlatInputs` (one flat row). Raises nothing.
    """
    several = isinstance(x, (list, tuple, dict)) and isinstance(model, keras.Model)
    return several and len(input_names(model)) > 1


class FlatInputs:
    """The inputs `x` of `model` as one flat array, with the attacked inputs' bounds and mask.

    Args:
        model: a Keras model of one or several inputs.
        x: a list (in `model.inputs` order) or dict (keyed by input name) of float arrays `(n, ...)`.
        attack_inputs: None (every input may change) or a list of input names, the inputs that may change.
        clip_values: None, one `(lo, hi)` pair for every input (scalars or arrays), or a dict
            `{name: (lo, hi)}` (an input without an entry is unbounded).
        mask: None, or a dict `{name: 0/1 array broadcastable to that input's shape}` (1: may change).

    Attributes:
        names, shapes, model (the flat model), x (float32 `(n, D)`), clip_values (None or float32
        `(lo, hi)` of shape `(D,)`), mask (None or float32 `(D,)`).

    Raises:
        ValueError: an unknown input name, or bounds or a mask that do not broadcast to their input.
    """

    def __init__(self, model, x, *, attack_inputs=None, clip_values=None, mask=None):
        x, self.n = check_x(model, x)
        self.names = input_names(model)
        self.as_dict = isinstance(x, dict)
        leaves = [x[name] for name in self.names] if self.as_dict else list(x)
        self.shapes = [tuple(a.shape[1:]) for a in leaves]
        self.x = np.concatenate([a.reshape(self.n, -1).astype(np.float32) for a in leaves], axis=1)
        attacked = self._names(attack_inputs, "attack_inputs")
        self.clip_values = self._bounds(clip_values)
        masks = self._per_input(mask or {}, "mask", 1.0)
        masks = [m * (name in attacked) for m, name in zip(masks, self.names)]
        self.mask = None if all(m.all() for m in masks) else np.concatenate(masks)
        key = dict(names=tuple(self.names), shapes=tuple(self.shapes), as_dict=self.as_dict)
        self.model = cached(model, "flat_inputs", lambda: self._flat_model(model), **key)

    def _names(self, names, what):
        if names is None:
            return list(self.names)
        names = [names] if isinstance(names, str) else list(names)
        unknown = [name for name in names if name not in self.names]
        if unknown:
            _checks.fail(what, f"a list of the model's input names {self.names}", names)
        return names

    def _per_input(self, values, what, default):
        """Per input, `values[name]` broadcast to its features `(d_i,)` float32 (`default` if absent)."""
        if not isinstance(values, dict):
            _checks.fail(
                what, f"a dict keyed by input name ({self.names}) for several inputs", values, TypeError
            )
        self._names(list(values), what)
        out = []
        for name, shape in zip(self.names, self.shapes):
            value = np.asarray(values.get(name, default), np.float32)
            try:
                out.append(np.broadcast_to(value, shape).reshape(-1))
            except ValueError:
                raise ValueError(
                    f"`{what}[{name!r}]` must broadcast to that input's shape {shape}. Received: shape "
                    f"{value.shape}"
                ) from None
        return out

    def _bounds(self, clip_values):
        if clip_values is None:
            return None
        if not isinstance(clip_values, dict):
            clip_values = {name: clip_values for name in self.names}
        lo = self._per_input({k: v[0] for k, v in clip_values.items()}, "clip_values", -_WIDE)
        hi = self._per_input({k: v[1] for k, v in clip_values.items()}, "clip_values", _WIDE)
        return np.concatenate(lo), np.concatenate(hi)

    def _flat_model(self, model):
        flat = keras.Input((self.x.shape[1],), name="flat_inputs")
        parts, start = [], 0
        for shape in self.shapes:
            size = math.prod(shape)
            parts.append(keras.layers.Reshape(shape)(flat[:, start : start + size]))
            start += size
        keyed = self.as_dict or isinstance(getattr(model, "input", None), dict)  # the model's own structure
        inputs = dict(zip(self.names, parts)) if keyed else parts
        wrapped = keras.Model(flat, model(inputs))
        if getattr(model, "loss", None):  # attacked through the model's own compiled loss
            wrapped.compile(loss=model.loss)
        return wrapped

    def eps(self, eps, norm):
        """`eps` as the flat problem takes it: a number as is, a dict `{name: eps}` (Linf) per feature."""
        if not isinstance(eps, dict):
            return eps
        if norm != np.inf:
            _checks.fail("eps", "one number for L2 and L1 (a dict of per-input eps needs norm=np.inf)", eps)
        return np.concatenate(self._per_input(eps, "eps", 0.0))

    def flatten(self, x):
        """Inputs in the user's structure as one float32 array `(n, D)`."""
        leaves = [x[name] for name in self.names] if self.as_dict else list(x)
        return np.concatenate([np.asarray(a, np.float32).reshape(len(a), -1) for a in leaves], axis=1)

    def unflatten(self, flat):
        """The flat rows `(n, D)` cut back into the user's structure (a list or a dict by name)."""
        ends = np.cumsum([0] + [math.prod(s) for s in self.shapes])
        leaves = [flat[:, a:b].reshape((len(flat),) + s) for a, b, s in zip(ends[:-1], ends[1:], self.shapes)]
        return dict(zip(self.names, leaves)) if self.as_dict else leaves
