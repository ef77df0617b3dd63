"""A score-based attack's step compiled whole (forward passes only), and its random draws on the device:
what the backends' `search.py` share.

`compile_search(objective, propose, keep, draws)` gives `call(trainable, non_trainable, state, fixed)
-> state`: `u`, `draws` uniform numbers per row drawn with `state["seed"]`, `candidate = propose(state,
fixed, u)`, the aux of `objective(trainable, non_trainable, candidate, fixed["y"], fixed["weights"])`
(no gradient), then `keep(state, fixed, candidate, aux)` with the next seed; `propose` and `keep` are
written in `keras.ops`. One `jax.jit`; one `tf.function` with `propose` and `keep` each one nested XLA
cluster (the draw and the forward outside them, on TensorFlow's kernels: XLA's stateless uniform
gives other numbers than TensorFlow's for the same seed); or on PyTorch the traced forward of
`torch/trace.py` and the rest eager under `torch.no_grad`.

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


def pair(seed):
    """The int32 seed pair `[seed mod (2**31 - 1), 0]` (numpy) of an int seed."""
    return np.asarray([int(seed) % (2**31 - 1), 0], np.int32)


def composed(objective, propose, keep, draws, uniform):
    """`step(trainable, non_trainable, state, fixed)`: the draw, `propose`, the forward pass, `keep`."""

    def step(trainable, non_trainable, state, fixed):
        u, seed = uniform((state["x"].shape[0], draws), state["seed"])
        candidate = propose(state, fixed, u)
        aux = objective(trainable, non_trainable, candidate, fixed["y"], fixed["weights"])[1]
        return dict(keep(state, fixed, candidate, aux), seed=seed)

    return step
