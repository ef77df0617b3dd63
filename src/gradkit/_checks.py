"""Argument checks shared by every layer: one message form, one rule for exception types.

Every message reads "`name` must be <what is expected>. Received: name=<value>". A value of the wrong
type raises TypeError; a value of the right type outside its range raises ValueError. Each check
returns the value in canonical form (a Python int, float or bool), so callers use what it returns.

Checks that need a model or data (shapes, labels) live in `gradkit.gradients`; this module imports
nothing from gradkit and nothing heavier than numpy.
"""

import numbers

import numpy as np

_NORMS = {"inf": np.inf, "linf": np.inf, "l2": 2.0, "2": 2.0, "l1": 1.0, "1": 1.0, "l0": 0.0, "0": 0.0}
_SPELLED = {np.inf: 'np.inf (or "inf", "linf")', 2.0: '2 (or "l2")', 1.0: '1 (or "l1")', 0.0: '0 (or "l0")'}
GRADIENT_NORMS = (np.inf, 2, 1)  # the norms of the gradient attacks (FGSM, BIM, PGD, APGD) and of `evaluate`


def fail(name, expected, value, error=ValueError):
    """Raises `error` with the house message: "`name` must be expected. Received: name=value"."""
    raise error(f"`{name}` must be {expected}. Received: {name}={value!r}")


def is_int(value):
    """True for Python and numpy integers (not bools)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value):
    """True for Python and numpy real numbers (not bools)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_flag(value, name):
    """`value` as a bool; TypeError unless it is True or False (numpy bools included)."""
    if not isinstance(value, (bool, np.bool_)):
        fail(name, "True or False", value, TypeError)
    return bool(value)


def check_int(value, name, *, minimum=None, allow_none=False):
    """`value` as an int >= `minimum`; TypeError for a non-integer, ValueError below `minimum`."""
    if value is None and allow_none:
        return None
    expected = (
        "an integer" + ("" if minimum is None else f" >= {minimum}") + (" or None" if allow_none else "")
    )
    if not is_int(value):
        fail(name, expected, value, TypeError)
    if minimum is not None and value < minimum:
        fail(name, expected, value)
    return int(value)


def check_real(value, name, *, minimum=None, strict=False, maximum=None, allow_none=False):
    """`value` as a finite float in range.

    `minimum` is inclusive unless `strict` (then `value > minimum`); `maximum` is inclusive.
    TypeError for a non-number, ValueError for NaN, inf or a value out of range.
    """
    if value is None and allow_none:
        return None
    bounds = []
    if minimum is not None:
        bounds.append(f"{'>' if strict else '>='} {minimum}")
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    finite = "a finite number" + (" " + " and ".join(bounds) if bounds else "")
    if not is_real(value):
        fail(name, finite, value, TypeError)
    value = float(value)
    if not np.isfinite(value):
        fail(name, finite, value)
    too_low = minimum is not None and (value <= minimum if strict else value < minimum)
    if too_low or (maximum is not None and value > maximum):
        fail(name, " and ".join(bounds), value)
    return value


def check_choice(value, name, choices):
    """`value` if it is one of `choices` (compared with ==); ValueError otherwise."""
    if not isinstance(value, str) or value not in choices:
        fail(name, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def check_batch_size(batch_size, name="batch_size"):
    """None, or a positive int (rows per compiled call)."""
    return check_int(batch_size, name, minimum=1, allow_none=True)


def check_seed(seed, name="seed"):
    """None, or an int >= 0."""
    return check_int(seed, name, minimum=0, allow_none=True)


def check_eps(eps, name="eps"):
    """`eps` as a float >= 0."""
    return check_real(eps, name, minimum=0)


def check_eps_step(eps_step, name="eps_step"):
    """`eps_step` as a float > 0."""
    return check_real(eps_step, name, minimum=0, strict=True)


def check_steps(steps, name="steps"):
    """`steps` as an int >= 1."""
    return check_int(steps, name, minimum=1)


def check_norm(norm, name="norm", allowed=(np.inf, 2), *, attack=None):
    """`norm` in canonical form, if it is one of the `allowed` norms; ValueError otherwise.

    Spellings: np.inf / "inf" / "linf" -> np.inf; 2 / "l2" / "2" -> 2.0; 1 / "l1" / "1" -> 1.0; 0 / "l0" /
    "0" -> 0.0. `allowed` lists what the caller takes (each function states its own: APGD and PGD take
    inf, 2 and 1; a minimum-norm attack may take 0 too). Defaults to (np.inf, 2). `attack`, when given,
    is named in the message ("... for FMN").
    """
    key = norm.lower() if isinstance(norm, str) else norm
    value = None
    if is_real(key) and not isinstance(key, str) and key in _NORMS.values():
        value = float(key)
    elif isinstance(key, str):
        value = _NORMS.get(key)
    allowed = tuple(float(a) for a in allowed)
    if value is None or value not in allowed:
        spelled = " or ".join(_SPELLED[a] for a in sorted(allowed, reverse=True))
        where = f" for {attack}" if attack else ""
        raise ValueError(f"`{name}` must be {spelled}{where}. Received: {name}={norm!r}")
    return value


def norm_name(norm):
    """The short name of a canonical norm: "linf", "l2", "l1" or "l0" (files, reports, fingerprints)."""
    return "linf" if norm == np.inf else f"l{int(norm)}"


def check_clip_values(clip_values, name="clip_values"):
    """None, or `(min, max)` as two finite floats with min <= max."""
    if clip_values is None:
        return None
    expected = "None or a pair (min, max) of finite numbers with min <= max"
    try:
        lo, hi = clip_values
    except (TypeError, ValueError):
        fail(name, expected, clip_values)
    if not (is_real(lo) and is_real(hi)):
        fail(name, expected, clip_values)
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        fail(name, expected, clip_values)
    return lo, hi


def check_numbers(values, name, *, minimum=None, allow_empty=False):
    """A non-empty list of finite floats >= `minimum` (a single number is a list of one)."""
    if is_real(values):
        values = [values]
    try:
        values = list(values)
    except TypeError:
        fail(name, "a list of finite numbers", values, TypeError)
    if not values and not allow_empty:
        fail(name, "a non-empty list of finite numbers", values)
    return [check_real(v, f"{name}[{i}]", minimum=minimum) for i, v in enumerate(values)]


def check_clip(clip_values, name="clip_values"):
    """None, `(min, max)` floats (`check_clip_values`), or per-feature bounds: `(lo, hi)` as float32
    arrays (either may be a scalar) broadcastable to each other, finite, with lo <= hi; their shape is
    checked against the input's by `broadcast_box`."""
    if clip_values is None:
        return None
    try:
        lo, hi = clip_values
    except (TypeError, ValueError):
        return check_clip_values(clip_values, name)
    if np.ndim(lo) == 0 and np.ndim(hi) == 0:
        return check_clip_values(clip_values, name)
    expected = "a pair (lo, hi) of finite arrays broadcastable to one input's shape, with lo <= hi"
    try:
        lo, hi = np.broadcast_arrays(np.asarray(lo, np.float32), np.asarray(hi, np.float32))
    except (TypeError, ValueError):
        fail(name, expected, clip_values)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()) or (lo > hi).any():
        fail(name, expected, clip_values)
    return lo, hi


def check_mask(mask, name="mask"):
    """None, or the changeable features: an array of 0 and 1 (or bools), 1 = may change, as float32."""
    if mask is None:
        return None
    try:
        values = np.asarray(mask)
    except (TypeError, ValueError):
        fail(name, "None or an array of 0 and 1 (1: the feature may change)", mask, TypeError)
    if values.dtype.kind not in "biuf" or not np.isin(values, (0, 1)).all():
        fail(name, "None or an array of 0 and 1 (1: the feature may change)", mask)
    return values.astype(np.float32)


def broadcast_box(clip_values, mask, x0):
    """`(clip_values, mask)` for the checked batch `x0` `(n, ...)`: scalar bounds as given, per-feature
    bounds and the mask broadcast to one input's shape with a leading axis of 1.

    Args:
        clip_values: None, `(min, max)` floats, or `(lo, hi)` arrays (`check_clip`).
        mask: None or a float32 0/1 array (`check_mask`).
        x0: a numpy batch `(n, ...)`.

    Returns:
        `(clip_values, mask)`: the arrays as float32 `(1, *x0.shape[1:])`, scalars and None as given.

    Raises:
        ValueError: per-feature bounds or a mask that do not broadcast to one input's shape.
    """
    shape = tuple(x0.shape[1:])

    def one(a, name):
        try:
            return np.ascontiguousarray(np.broadcast_to(a, shape)[None], np.float32)
        except ValueError:
            raise ValueError(
                f"`{name}` must broadcast to one input's shape {shape}. Received: {name} of shape "
                f"{np.shape(a)}"
            ) from None

    if clip_values is not None and np.ndim(clip_values[0]):
        clip_values = tuple(one(a, "clip_values") for a in clip_values)
    return clip_values, None if mask is None else one(mask, "mask")
