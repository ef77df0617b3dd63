"""The only place where gradkit touches TensorFlow, JAX or PyTorch.

Each backend module (`tensorflow.py`, `jax.py`, `torch.py`) exposes the same functions:

- `compile_grad(fn, wrt, per_output=False)`: compiles the pure loss function
  `fn(trainable, non_trainable, x, y, sample_weight) -> loss` and returns a callable with the same
  arguments that gives `(loss, grads)`, the gradient taken w.r.t. `x` (`wrt="x"`) or w.r.t.
  `trainable` (`wrt="trainable"`). With `per_output=True`, `fn` returns a vector of K losses and the
  gradients have a leading axis of size K (one backward pass per entry, inside the same compiled call).
- `compile_forward(fn)`: the same function compiled without a gradient (forward passes only).
- `compile_grad(..., has_aux=True)`: `fn` returns `(loss, aux)`; the call returns `((loss, aux), grads)`.
- `variable_values(variables, differentiable)`: the current values of Keras variables, passed as
  arguments so that later training is seen without recompiling.
- `EAGER`: True where nothing is traced (PyTorch); gradkit then counts distinct input signatures.
- `group_norms(grads, matrix, last)`: `sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])` for a list of
  dense gradients (the in-step norms of `gradkit.norms.NormValues`): a float32 tensor, or a list of
  Python floats where the gradients are on the host anyway (PyTorch's CPU).
- `assign_add(variable, value)`: `variable += value` for a Keras variable, the cheapest way the
  backend has (the in-step metric update).
- `wrap_train_step(model, metric, norms_fn)`: `(train_step, test_step)` that record the norms of the
  gradients the training step applies into `metric` (see `gradkit.callbacks`).
- `batch_multiple()` and `distribute_batch(structure)`: data parallelism under an active
  `keras.distribution` (JAX only; the other backends raise NotImplementedError when one is set).

The module is chosen from `keras.backend.backend()` at import time, the Keras way (`KERAS_BACKEND`).
"""

import keras

_name = keras.backend.backend()
if _name == "tensorflow":
    from gradkit.backend import tensorflow as _impl
elif _name == "jax":
    from gradkit.backend import jax as _impl
elif _name == "torch":
    from gradkit.backend import torch as _impl
else:  # pragma: no cover - numpy/openvino have no autodiff
    raise ImportError(
        "gradkit needs a Keras backend with automatic differentiation: "
        f"tensorflow, jax or torch. Received: KERAS_BACKEND={_name!r}"
    )

NAME = _name
EAGER = _impl.EAGER
compile_grad = _impl.compile_grad
compile_forward = _impl.compile_forward
variable_values = _impl.variable_values
wrap_train_step = _impl.wrap_train_step
batch_multiple = _impl.batch_multiple
distribute_batch = _impl.distribute_batch
group_norms = _impl.group_norms
assign_add = _impl.assign_add

__all__ = [
    "NAME",
    "EAGER",
    "assign_add",
    "batch_multiple",
    "compile_forward",
    "compile_grad",
    "distribute_batch",
    "group_norms",
    "variable_values",
    "wrap_train_step",
]
