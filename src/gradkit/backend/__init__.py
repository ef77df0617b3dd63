"""The only place where gradkit touches TensorFlow, JAX or PyTorch.

Each backend module (`tensorflow.py`, `jax.py`, `torch.py`) exposes the same functions:

- `compile_grad(fn, wrt, per_output=False)`: compiles the pure loss function
  `fn(trainable, non_trainable, x, y, sample_weight) -> loss` and returns a callable with the same
  arguments that gives `(loss, grads)`, the gradient taken w.r.t. `x` (`wrt="x"`) or w.r.t.
  `trainable` (`wrt="trainable"`). With `per_output=True`, `fn` returns a vector of K losses and the
  gradients have a leading axis of size K (one backward pass per entry, inside the same compiled call).
- `quiet_retracing()`: a context manager that silences the framework's retracing warnings for gradkit's
  own `predict` calls on new models (TensorFlow; a no-op elsewhere).
- `set_random_seed(seed)`: `keras.utils.set_random_seed` without importing TensorFlow on JAX/PyTorch.
- `enable_determinism()`: the framework's deterministic ops from now on (TensorFlow's op determinism,
  `torch.use_deterministic_algorithms`); returns None, or a str saying why it cannot (JAX on a GPU
  without `XLA_FLAGS=--xla_gpu_deterministic_ops=true`; JAX on CPU is deterministic already).
- `compile_forward(fn)`: the same function compiled without a gradient (forward passes only). Its
  callable has `bind(trainable, non_trainable, y, weights)`, which returns `f(x)` for one tensor `x`
  with the other arguments fixed (on PyTorch flattened once, for the thousands of calls of a
  score-based attack on the same rows).
- `compile_step(objective, update, jit_compile=False)`: one attack step compiled whole, `call(trainable,
  non_trainable, state, fixed) -> state`: the gradient of `objective(trainable, non_trainable,
  state["x"], fixed["y"], fixed["weights"]) -> (loss, aux)` w.r.t. `state["x"]`, then `update(state,
  aux, grad, fixed)`; the state (a dict of tensors) stays on the device between steps
  (`gradkit.attacks`' engine). `jit_compile` (the models' Keras setting): on TensorFlow the whole step
  is one XLA cluster (else only the update); JAX is always XLA, PyTorch eager.
- `linf_step`: None, or (PyTorch) `linf_step(x, x0, g, size, eps, bounds)`: the Linf projected step
  `clip(x0 + clip(x + size * sign(g) - x0, -eps, eps), lo, hi)` computed in the memory of the step's
  own gradient `g` (an eager update allocates a full-size tensor per operation, which costs page faults
  on a CPU; `_torch_steps.py`). Compiled steps (JAX, TensorFlow) fuse or plan their buffers: None.
- `apgd_linf_step`: None, or (PyTorch) `apgd_linf_step(x, x_prev, x0, g, eta, a, eps, bounds, active)`:
  APGD's Linf proposal (the projected step, the momentum mix, its projection, the rows attacked) in
  the gradient's memory and one scratch buffer: `(x_next, x)` (`x` is the next previous iterate).
- `linf_window`: None, or (PyTorch) `linf_window(best, ends, in_rows, in_cols, tolerance, signs)`: the
  Square Attack's Linf candidate (the window's sums, the corners it takes) in one new tensor instead
  of eight, on `(n, h, w * c)` views (no inner loop over the channels).
- `compile_search(objective, propose, keep, draws)`: a score-based attack's step compiled whole,
  forward passes only: `call(trainable, non_trainable, state, fixed) -> state` draws `u` (`draws`
  uniform numbers per row, with `state["seed"]`, which moves on), then `candidate = propose(state,
  fixed, u)`, `aux` the aux of `objective(trainable, non_trainable, candidate, fixed["y"],
  fixed["weights"])`, and returns `keep(state, fixed, candidate, aux)` with the next seed.
  `seed_state(seed)` is the seed a state carries for an int seed, `uniform(shape, seed)` returns
  `(float32 sample in [0, 1), next seed)` inside such a step (see `_search.py` for why the seed is
  not a `keras.random.SeedGenerator` there).
- `compile_grad(..., has_aux=True)`: `fn` returns `(loss, aux)`; the call returns `((loss, aux), grads)`.
- `stateless_call(model, trainable, non_trainable, *args, **kwargs)`: `model.stateless_call` where
  every layer reads the values given, also the parameters of a `torch.nn.Module` wrapped in
  `keras.layers.TorchModuleWrapper` (PyTorch), which read their own tensors under Keras' stateless call
  (keras#20279); a wrapped module whose parameters are not the model's variables raises ValueError.
- `variable_values(variables, differentiable)`: the current values of Keras variables, passed as
  arguments so that later training is seen without recompiling.
- `EAGER`: True where nothing is compiled ahead (PyTorch); gradkit then counts distinct input signatures.
- `ROW_QUANTUM`: None, or the multiple the row count of a compiled call is padded up to where a new
  input shape costs little (PyTorch: 32); with None, rows are padded to the batch size or the next
  power of two, which bounds the number of traces.
- `group_norms(grads, matrix, last)`: `sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])` for a list of
  dense gradients (the in-step norms of `gradkit.monitor`): an opaque value, a float32 tensor or, where
  the gradients are on the host anyway (PyTorch's CPU), a list of Python floats. Callers hand it back
  to the next four functions (`_norm_values.py`), which alone look inside:
- `divide_norms(values, scale)`: the norms divided by the loss-scale factor.
- `applied_norms(values, iteration, steps)`: the norms on a step that applies an accumulated update
  (`(iteration + 1) % steps == 0`), zeros on the others.
- `add_norms(sums, host_sums, values)`: adds a step's norms into a metric's running sums (the float32
  variable `sums`, or the host list `host_sums`); returns the host sums to keep.
- `norm_means(sums, host_sums, names)`: the running means `{name: value}` (tensors or Python floats).
- `assign_add(variable, value)`: `variable += value` for a Keras variable, the cheapest way the
  backend has (the in-step metric update).
- `weight_stats(grads, before, after, columns, shapes, clip)`: a table `(n, len(columns))` of per-weight
  statistics of a step (squared norms, max |g|, counts of non-finite entries and zeros, squared norms
  of the weights before and of the update; see `_weight_stats.py`): a float32 tensor, or on PyTorch's
  CPU a float64 numpy array (the diagnostics of `gradkit.monitor` then run on the host).
- `metric_values_before_step(model, args, variables)`: the values of metric variables before the
  training step `model.train_step(*args)` runs (as `values_before_step` for optimizer variables).
- `summaries_available()`, `write_histograms(log_dir, items, step)`: TensorBoard histograms through
  TensorFlow's summary writer, on every backend (`_summaries.py`).
- `cond(predicate, true_fn, size)`: `true_fn()` where `predicate` holds, else `size` zeros; only one
  branch runs (a traced conditional; a Python `if` on PyTorch, where `predicate` is a bool).
- `values_before_step(model, args, variables)`: the values of optimizer variables as they are before
  the training step `model.train_step(*args)` runs (the step's arguments are opaque to the caller).
- `wrap_train_step(model, metric, norms_fn)`: `(train_step, test_step)` that record the norms of the
  gradients the training step applies into `metric` (see `gradkit.monitor`). With
  `norms_fn.needs_weights`, it is called `norms_fn(grads, scale, before, after)` with the trainable
  weights' values before and after the update (PyTorch copies them only where `norms_fn.sampled()`).
- `plain_train_step(metric, step_cls, model)`: the class's training step untouched (the steps that
  `every_n_steps` leaves out run it), its logs completed with `metric`'s keys where it reports no metrics
  (PyTorch). On TensorFlow and JAX `metric` reports nothing while it is traced (`metric.quiet()`), so
  its graph computes nothing of `metric`'s, and its logs lack `metric`'s keys (the step has
  `quiet = True`): `gradkit.monitor` adds them on the host (`GradientNormMetric.complete`).
- `input_ascent(forward, loss_of, x, update, steps)`: the inner attack of adversarial
  training, run inside the training step: `steps` times `x <- update(x, grad_x loss_of(forward(x)))`,
  the gradient w.r.t. `x` alone, the result cut from the outer gradient (`gradkit.training`).
- `is_out_of_memory(exc)` and `out_of_memory_hint(rows, what)`: the framework's out-of-memory error
  told apart from other failures, and a context manager that re-raises it as
  `gradkit.errors.OutOfMemoryError` naming `batch_size` (`_memory.py`).
- `to_tensor(array)` and `to_numpy(tensor)`: `keras.ops.convert_to_tensor` / `convert_to_numpy` for
  numpy arrays of a fixed dtype, without Keras' per-call dtype checks where they cost (PyTorch).
- `batch_multiple()` and `distribute_batch(structure)`: data parallelism under an active
  `keras.distribution` (JAX only; the other backends raise NotImplementedError when one is set).
- `start_processes()`, `processes()`, `all_gather(obj)`, `mesh_spans_processes()`, `key_value()`: process
  groups (torch.distributed, jax.distributed), see `_processes.py`.

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

from gradkit.backend._memory import is_out_of_memory  # noqa: E402
from gradkit.backend._memory import out_of_memory_hint  # noqa: E402
from gradkit.backend import _common  # noqa: E402
from gradkit.backend._processes import all_gather  # noqa: E402
from gradkit.backend._processes import key_value  # noqa: E402
from gradkit.backend._processes import mesh_spans_processes  # noqa: E402
from gradkit.backend._processes import processes  # noqa: E402
from gradkit.backend._processes import start_processes  # noqa: E402
from gradkit.backend._summaries import summaries_available  # noqa: E402
from gradkit.backend._summaries import write_histograms  # noqa: E402

NAME = _name
EAGER = _impl.EAGER
STEPS_RUN_EAGERLY = _impl.EAGER  # temporary, until the backend redesign lands
ROW_QUANTUM = _impl.ROW_QUANTUM
compile_grad = _impl.compile_grad
compile_forward = _impl.compile_forward
compile_step = _impl.compile_step
compile_search = _impl.compile_search
seed_state = _impl.seed_state
uniform = _impl.uniform
quiet_retracing = _impl.quiet_retracing
set_random_seed = _impl.set_random_seed
enable_determinism = _impl.enable_determinism
variable_values = _impl.variable_values
wrap_train_step = _impl.wrap_train_step
plain_train_step = _impl.plain_train_step
batch_multiple = _impl.batch_multiple
distribute_batch = _impl.distribute_batch
group_norms = _impl.group_norms
divide_norms = _impl.divide_norms
applied_norms = _impl.applied_norms
add_norms = _impl.add_norms
norm_means = _impl.norm_means
assign_add = _impl.assign_add
values_before_step = _impl.values_before_step
weight_stats = _impl.weight_stats
metric_values_before_step = getattr(_impl, "metric_values_before_step", _common.metric_values_before_step)
cond = _impl.cond
input_ascent = _impl.input_ascent
stateless_call = _impl.stateless_call
to_tensor = getattr(_impl, "to_tensor", keras.ops.convert_to_tensor)
to_numpy = getattr(_impl, "to_numpy", keras.ops.convert_to_numpy)
linf_step = getattr(_impl, "linf_step", None)
apgd_linf_step = getattr(_impl, "apgd_linf_step", None)
linf_window = getattr(_impl, "linf_window", None)

__all__ = [
    "NAME",
    "EAGER",
    "ROW_QUANTUM",
    "add_norms",
    "all_gather",
    "applied_norms",
    "assign_add",
    "batch_multiple",
    "compile_forward",
    "compile_grad",
    "cond",
    "compile_step",
    "compile_search",
    "seed_state",
    "uniform",
    "quiet_retracing",
    "set_random_seed",
    "start_processes",
    "stateless_call",
    "enable_determinism",
    "distribute_batch",
    "divide_norms",
    "group_norms",
    "input_ascent",
    "is_out_of_memory",
    "key_value",
    "linf_step",
    "apgd_linf_step",
    "linf_window",
    "norm_means",
    "mesh_spans_processes",
    "out_of_memory_hint",
    "processes",
    "to_numpy",
    "to_tensor",
    "values_before_step",
    "variable_values",
    "weight_stats",
    "wrap_train_step",
    "plain_train_step",
    "metric_values_before_step",
    "summaries_available",
    "write_histograms",
]
