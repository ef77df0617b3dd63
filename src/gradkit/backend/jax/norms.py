"""JAX's in-step norms and per-weight statistics, traced into the training step (the values are float32
arrays, `common/norm_values.py`)."""

import jax.numpy as jnp

from gradkit.backend.common import norm_values
from gradkit.backend.common import weight_stats as common_stats

divide_norms = norm_values.divide_norms
applied_norms = norm_values.applied_norms
norm_means = norm_values.norm_means
cond = common_stats.cond


def _total(t):
    if t.ndim < 2:
        return jnp.sum(t)
    # A product with ones, the elementwise work fused in, runs on every core; a sum(g * g) on one.
    return jnp.sum(jnp.reshape(t, (-1, t.shape[-1])) @ jnp.ones((t.shape[-1],), jnp.float32))


def _squared_norm(g):
    return _total(jnp.square(jnp.asarray(g, jnp.float32)))


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])`, float32.

    Args:
        grads: the n dense gradients.
        matrix: the constant float32 0/1 matrix `(k, n + 1)`.
        last: the last squared entry (a float32 scalar: 1, or the squared loss scale).

    Returns:
        float32 array `(k,)`.
    """
    squares = [_squared_norm(g) for g in grads] + [jnp.asarray(last, jnp.float32)]
    return jnp.sqrt(matrix @ jnp.stack(squares))


# The per-weight statistics as plain reductions: XLA fuses each elementwise producer into its reduction
# (one pass, nothing written), where the product with ones above would materialize its input and run a
# threaded dot per statistic.
weight_stats = common_stats.stats_builder(lambda t: jnp.sum(jnp.square(jnp.asarray(t, jnp.float32))), jnp.sum)


def assign_add(variable, value):
    """`variable += value` (a Keras variable; inside a stateless scope, recorded there)."""
    variable.assign_add(value)


add_norms = norm_values.norm_adder(assign_add)
