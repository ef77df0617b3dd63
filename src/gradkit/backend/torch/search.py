"""PyTorch's `compile_search` (the forward traced per signature, the rest eager under `torch.no_grad`)
and its draws from a `torch.Generator` carried in the state (`common/search.py`)."""

import torch

from gradkit import _keras_internals
from gradkit.backend.common.search import composed, pair
from gradkit.backend.torch.trace import compile_forward


def compile_search(objective, propose, keep, draws):
    """A score-based attack's step, forward passes only (`common/search.py`): the forward traced per
    signature (`trace.compile_forward`, its `trace_count`), the rest eager under `torch.no_grad`.

    Returns:
        `call(trainable, non_trainable, state, fixed) -> state`, with a `trace_count` and its `traced`.
    """
    forward = compile_forward(lambda *args: objective(*args)[1])
    step = composed(lambda *args: (None, forward(*args)), propose, keep, draws, uniform)

    def call(trainable, non_trainable, state, fixed):
        with torch.no_grad():
            out = step(trainable, non_trainable, state, fixed)
        call.trace_count = forward.trace_count
        return out

    call.trace_count, call.traced = 0, forward.traced
    return call


def seed_state(seed):
    """A `torch.Generator` on Keras' device, seeded with `seed`."""
    return torch.Generator(device=_keras_internals.torch_device()).manual_seed(int(pair(seed)[0]))


def uniform(shape, seed):
    """`torch.rand(shape, generator=seed)` on the generator's device; the generator moves on itself."""
    return torch.rand(tuple(shape), generator=seed, device=seed.device, dtype=torch.float32), seed
