"""A score-based attack's step compiled whole (forward passes only), and its random draws on the device.

`compile_search(objective, propose, keep, draws)` gives `call(trainable, non_trainable, state, fixed)
-> state`: `u`, `draws` uniform numbers per row drawn with `state["seed"]`, `candidate = propose(state,
fixed, u)`, the aux of `objective(trainable, non_trainable, candidate, fixed["y"], fixed["weights"])`
(no gradient), then `keep(state, fixed, candidate, aux)` with the next seed; `propose` and `keep` are
written in `keras.ops`. One `jax.jit`; one `tf.function` with `propose` and `keep` each one nested XLA
cluster (the draw and the forward outside them, on TensorFlow's kernels: XLA's stateless uniform
gives other numbers than TensorFlow's for the same seed); or on PyTorch the traced forward of
`_torch_trace` and the rest eager under `torch.no_grad`.

The random draws: `seed_state(seed)` is the state's seed for an int seed and `uniform(shape, seed)`
returns `(sample in [0, 1) float32, next seed)`. Keras' random ops take a seed tensor only on JAX (a
stateless key); on TensorFlow and PyTorch `keras.random` wants an int or a `SeedGenerator`, whose
variable it reads and writes at each draw (on PyTorch it reads the seed to the host with `int()` per
draw, a device sync on a GPU). So the seed is carried in the state, where each backend compiles it
once: JAX `keras.random.uniform` with the key in the state; TensorFlow `tf.random.stateless_uniform` (the
op behind `keras.random.uniform`) with the int32 seed pair in the state; PyTorch a `torch.Generator`
on Keras' device in the state (the step is eager there), seeded once from the host.
"""

import numpy as np


def _pair(seed):
    return np.asarray([int(seed) % (2**31 - 1), 0], np.int32)


def _composed(objective, propose, keep, draws, uniform):
    """`step(trainable, non_trainable, state, fixed)`: the draw, `propose`, the forward pass, `keep`."""

    def step(trainable, non_trainable, state, fixed):
        u, seed = uniform((state["x"].shape[0], draws), state["seed"])
        candidate = propose(state, fixed, u)
        aux = objective(trainable, non_trainable, candidate, fixed["y"], fixed["weights"])[1]
        return dict(keep(state, fixed, candidate, aux), seed=seed)

    return step


# JAX -------------------------------------------------------------------------------------------------


def jax_search(objective, propose, keep, draws):
    """`compile_search` on JAX: the whole step in one `jax.jit`."""
    import jax

    step = _composed(objective, propose, keep, draws, jax_uniform)

    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        return step(trainable, non_trainable, state, fixed)

    compiled = jax.jit(traced)

    def call(trainable, non_trainable, state, fixed):
        return compiled(trainable, non_trainable, state, fixed)

    call.trace_count = 0
    return call


def jax_seed_state(seed):
    """A JAX PRNG key (raw uint32 pair) from an int seed."""
    import jax.numpy as jnp

    return jnp.asarray(_pair(seed).astype(np.uint32))


def jax_uniform(shape, seed):
    """`keras.random.uniform(shape, seed=key)` (stateless on JAX) and the next key."""
    import jax.numpy as jnp
    import keras

    sample = keras.random.uniform(shape, seed=seed, dtype="float32")
    return sample, seed + jnp.asarray([0, 1], jnp.uint32)


# TensorFlow ------------------------------------------------------------------------------------------


def tf_fused(fn):
    """`fn` (pure `keras.ops` on tensors) as one XLA cluster, to be called inside a `tf.function`.

    An attack's update is some twenty elementwise passes over the batch (select, step, projection,
    clip, records); run op by op, each allocates and writes a new batch-sized tensor (a 1,024x32x32x3
    APGD-CE step on a near-free model: 65 ms, 40x the forward+backward, 10x the same step written by
    hand under XLA). XLA fuses them into a few loops over the batch (benchmarks/README.md). The
    model's forward and backward stay outside the cluster, on TensorFlow's kernels.
    """
    import tensorflow as tf

    return tf.function(fn, autograph=False, jit_compile=True)


def tf_search(objective, propose, keep, draws):
    """`compile_search` on TensorFlow: one `tf.function`; `propose` and `keep` (some forty elementwise
    passes over the batch between them) each one nested XLA cluster, the draw and the forward pass
    outside on TensorFlow's kernels (`tf_fused`, as in `compile_step`)."""
    import tensorflow as tf

    step = _composed(objective, tf_fused(propose), tf_fused(keep), draws, tf_uniform)

    @tf.function(autograph=False)
    def traced(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        return step(trainable, non_trainable, state, fixed)

    from gradkit.backend._tf_dispatch import dispatcher

    fast = dispatcher(traced)  # no per-call argument matching

    def call(*args):
        return fast(*args)

    call.trace_count = 0
    return call


def tf_seed_state(seed):
    """The int32 seed pair of `tf.random.stateless_uniform` from an int seed."""
    import tensorflow as tf

    return tf.constant(_pair(seed))


def tf_uniform(shape, seed):
    """`tf.random.stateless_uniform(shape, seed)` and the next seed pair."""
    import tensorflow as tf

    sample = tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)
    return sample, seed + tf.constant([0, 1], tf.int32)


# PyTorch ---------------------------------------------------------------------------------------------


def torch_search(objective, propose, keep, draws):
    """`compile_search` on PyTorch: the forward traced per signature (`_torch_trace.compile_forward`,
    its `trace_count`), the rest eager under `torch.no_grad`."""
    import torch

    from gradkit.backend._torch_trace import compile_forward

    forward = compile_forward(lambda *args: objective(*args)[1])
    step = _composed(lambda *args: (None, forward(*args)), propose, keep, draws, torch_uniform)

    def call(trainable, non_trainable, state, fixed):
        with torch.no_grad():
            out = step(trainable, non_trainable, state, fixed)
        call.trace_count = forward.trace_count
        return out

    call.trace_count, call.traced = 0, forward.traced
    return call


def torch_seed_state(seed):
    """A `torch.Generator` on Keras' device, seeded with `seed`."""
    import torch

    from gradkit import _keras_internals

    return torch.Generator(device=_keras_internals.torch_device()).manual_seed(int(_pair(seed)[0]))


def torch_uniform(shape, seed):
    """`torch.rand(shape, generator=seed)` on the generator's device; the generator moves on itself."""
    import torch

    return torch.rand(tuple(shape), generator=seed, device=seed.device, dtype=torch.float32), seed
