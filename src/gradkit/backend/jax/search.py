"""JAX's `compile_search` (the whole step in one `jax.jit`) and its draws with a stateless key in the
state (`common/search.py`)."""

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gradkit.backend.common.search import composed, pair


def compile_search(objective, propose, keep, draws):
    """A score-based attack's step compiled whole, forward passes only, in one `jax.jit`
    (`common/search.py`).

    Returns:
        `call(trainable, non_trainable, state, fixed) -> state`, with a `trace_count`.
    """
    step = composed(objective, propose, keep, draws, uniform)

    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        return step(trainable, non_trainable, state, fixed)

    compiled = jax.jit(traced)

    def call(trainable, non_trainable, state, fixed):
        return compiled(trainable, non_trainable, state, fixed)

    call.trace_count = 0
    return call


def seed_state(seed):
    """A JAX PRNG key (raw uint32 pair) from an int seed."""
    return jnp.asarray(pair(seed).astype(np.uint32))


def uniform(shape, seed):
    """`keras.random.uniform(shape, seed=key)` (stateless on JAX) and the next key."""
    sample = keras.random.uniform(shape, seed=seed, dtype="float32")
    return sample, seed + jnp.asarray([0, 1], jnp.uint32)
