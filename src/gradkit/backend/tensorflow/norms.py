"""TensorFlow's in-step norms and per-weight statistics, traced into the training step (the values are
float32 tensors, `common/norm_values.py`)."""

import tensorflow as tf

from gradkit.backend.common import norm_values
from gradkit.backend.common import weight_stats as common_stats

divide_norms = norm_values.divide_norms
applied_norms = norm_values.applied_norms
norm_means = norm_values.norm_means
cond = common_stats.cond


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])`, float32 (dense gradients).

    Args:
        grads: the n dense gradients.
        matrix: the constant float32 0/1 matrix `(k, n + 1)`.
        last: the last squared entry (a float32 scalar: 1, or the squared loss scale).

    Returns:
        float32 tensor `(k,)`.
    """
    # l2_loss (sum(t**2) / 2) is one kernel, cheaper than reduce_sum(square) or a dot.
    squares = [2.0 * tf.nn.l2_loss(tf.cast(g, tf.float32)) for g in grads]
    squares.append(tf.cast(last, tf.float32))
    return tf.sqrt(tf.linalg.matvec(matrix, tf.stack(squares)))


weight_stats = common_stats.stats_builder(lambda t: 2.0 * tf.nn.l2_loss(t))


def assign_add(variable, value):
    """`variable += value` (a Keras variable; inside a stateless scope, recorded there)."""
    variable.assign_add(value)


add_norms = norm_values.norm_adder(assign_add)
