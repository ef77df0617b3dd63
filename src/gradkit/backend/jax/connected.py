"""Whether a JAX loss depends on what it is differentiated with respect to: JAX returns zeros silently
where TensorFlow returns None, so the jaxpr of the loss is walked once per input signature."""

import jax
import jax.numpy as jnp
from jax.extend.core import Literal

from gradkit.errors import DisconnectedGradientError

# Primitives whose derivative is zero everywhere: a loss reached only through them does not depend on
# its inputs in any useful way (TensorFlow returns None for them; JAX returns zeros silently).
_ZERO_DERIVATIVE = {
    "argmax",
    "argmin",
    "round",
    "floor",
    "ceil",
    "sign",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "not",
    "xor",
    "is_finite",
    "stop_gradient",
}


def _float(var):
    aval = getattr(var, "aval", None)
    return aval is not None and jnp.issubdtype(aval.dtype, jnp.inexact)


def _subjaxprs(eqn):
    for param in eqn.params.values():
        for item in param if isinstance(param, (list, tuple)) else (param,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                yield inner


def _connected(jaxpr, live):
    """Which outputs of `jaxpr` depend differentiably on the invars flagged in `live`."""
    connected = {v for v, flag in zip(jaxpr.invars, live) if flag and _float(v)}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _ZERO_DERIVATIVE:
            continue
        inputs = [not isinstance(v, Literal) and v in connected for v in eqn.invars]
        if not any(inputs):
            continue
        subs = list(_subjaxprs(eqn))
        if len(subs) == 1 and len(subs[0].invars) == len(eqn.invars):
            outs = _connected(subs[0], inputs)
        else:
            outs = [True] * len(eqn.outvars)
        connected.update(v for v, flag in zip(eqn.outvars, outs) if flag and _float(v))
    return [not isinstance(v, Literal) and v in connected for v in jaxpr.outvars]


def check_connected(fn, argnum, args):
    """Raises DisconnectedGradientError when no output of `fn(*args)` depends differentiably on
    `args[argnum]` (its jaxpr walked through every primitive of nonzero derivative)."""
    closed = jax.make_jaxpr(fn)(*args)
    leaves = [jax.tree_util.tree_leaves(a) for a in args]
    live = [i == argnum for i, group in enumerate(leaves) for _ in group]
    if not any(_connected(closed.jaxpr, live)):
        raise DisconnectedGradientError(
            "The loss does not depend on the values it is differentiated with respect to "
            "(a step such as argmax, round or a comparison cuts the gradient)."
        )
