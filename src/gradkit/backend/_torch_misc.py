"""PyTorch backend: the adversarial-training inner attack, seeding and deterministic algorithms (the
parts of `torch.py` that are not gradients or the in-step norms), and the attack step done in place."""

import os

import torch

from gradkit.backend._common import set_random_seed as _set_keras_seed
from gradkit.backend._search import torch_search as compile_search
from gradkit.backend._search import torch_seed_state as seed_state
from gradkit.backend._search import torch_uniform as uniform
from gradkit.backend._torch_steps import apgd_linf_step, linf_step, linf_window

__all__ = [
    "apgd_linf_step",
    "compile_search",
    "enable_determinism",
    "input_ascent",
    "linf_step",
    "linf_window",
    "seed_state",
    "set_random_seed",
    "uniform",
]


def input_ascent(forward, loss_of, x, update, steps):
    """`steps` times `x <- update(x, d loss_of(forward(x)) / dx)`, eagerly with `torch.autograd.grad` w.r.t.
    `x` alone (the adversarial-training inner attack); the result is detached."""
    x = x.detach()
    for _ in range(steps):
        z = x.requires_grad_(True)
        with torch.enable_grad():
            loss = loss_of(forward(z))
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():
            x = update(z.detach(), grad).detach()
    return x


def set_random_seed(seed):
    """Seeds Keras, Python, numpy and PyTorch (as `keras.utils.set_random_seed` does, without TensorFlow)."""
    _set_keras_seed(seed)
    torch.manual_seed(int(seed))


def enable_determinism():
    """Deterministic PyTorch algorithms from now on (`torch.use_deterministic_algorithms(True)`; on CUDA
    also `CUBLAS_WORKSPACE_CONFIG=:4096:8` when unset, which cuBLAS needs); returns None."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    return None
