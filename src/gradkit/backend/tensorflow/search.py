"""TensorFlow's `compile_search` (one `tf.function`, `propose` and `keep` each a nested XLA cluster) and
its stateless draws with an int32 seed pair in the state (`common/search.py`)."""

import tensorflow as tf

from gradkit.backend.common.search import composed, pair
from gradkit.backend.tensorflow.core import fused
from gradkit.backend.tensorflow.dispatch import dispatcher


def compile_search(objective, propose, keep, draws):
    """A score-based attack's step compiled whole, forward passes only (`common/search.py`).

    `propose` and `keep` (some forty elementwise passes over the batch between them) are each one nested
    XLA cluster, the draw and the forward pass outside on TensorFlow's kernels (`fused`, as in
    `compile_step`).

    Returns:
        `call(trainable, non_trainable, state, fixed) -> state`, with a `trace_count`.
    """
    step = composed(objective, fused(propose), fused(keep), draws, uniform)

    @tf.function(autograph=False)
    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        return step(trainable, non_trainable, state, fixed)

    fast = dispatcher(traced)  # no per-call argument matching

    def call(*args):
        return fast(*args)

    call.trace_count = 0
    return call


def seed_state(seed):
    """The int32 seed pair of `tf.random.stateless_uniform` from an int seed."""
    return tf.constant(pair(seed))


def uniform(shape, seed):
    """`tf.random.stateless_uniform(shape, seed)` and the next seed pair."""
    sample = tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)
    return sample, seed + tf.constant([0, 1], tf.int32)
