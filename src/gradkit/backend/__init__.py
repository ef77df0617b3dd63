"""The only place where gradkit touches TensorFlow, JAX or PyTorch: one folder per backend.

`tensorflow/`, `jax/` and `torch/` each define every name below, in the same modules (`core`, `search`,
`train_step`, `norms`, `noise_scale`, `distribution`, `fast_paths`); `common/` holds what they share.
The folder is chosen once, here, from `keras.backend.backend()` (`KERAS_BACKEND`), and its names are
re-exported. Above `backend/` nothing tests which backend runs: what differs is a capability below.

Capabilities (`core.py`):
- `STEPS_RUN_EAGERLY`: a compiled step is an eager Python call at every call (PyTorch): values built
  outside a trace can be reused, and host-side decisions inside a step are free.
- `ROW_QUANTUM`: None, or the multiple the rows of a compiled call are padded to, where a new shape is
  cheap (PyTorch: 32); with None, rows are padded to the batch size or the next power of two.
- `DATA_PARALLEL`: `keras.distribution` (a `DataParallel` mesh) is supported (JAX).
- `UNSEEDED_LAYERS_DRAW_GLOBALLY`: a random layer made without `seed=` draws from the framework's
  global generator at every call, not from the seed state a stateless call passes (PyTorch).
- `ITERATIONS_IN_STATE_ONCE_BUILT`: the optimizer's iteration counter is in the step's state only once
  the optimizer is built (JAX); elsewhere it can be read before.
- `COUNTER_READABLE_BETWEEN_CALLS`: the host can read the optimizer's counter between two calls of
  `fit`'s training function (TensorFlow, PyTorch; JAX's `fit` keeps its state in the step's arrays).
- `NAME`: the Keras backend's name, for reports only.

Core (`core.py`):
- `to_tensor(array)`, `to_numpy(tensor)`: numpy conversions (JAX: arrays spanning processes gathered).
- `variable_values(variables, differentiable=False)`: current values, passed as arguments.
- `compile_grad(fn, wrt, per_output=False, has_aux=False)`: a loss and its gradient w.r.t. x or weights.
- `compile_forward(fn)`: the loss function compiled without a gradient, with `bind`.
- `compile_step(objective, update, jit_compile=False)`: one attack step compiled whole.
- `stateless_call(model, trainable, non_trainable, *args, **kwargs)`: wrapped torch modules included.
- `wrap_module(module, input_shape, state_dict, name)`: a `torch.nn.Module` (weights from a state_dict
  mapping or file) as a Keras model, its output shape from one forward pass (PyTorch; None elsewhere).
- `set_random_seed(seed)`, `enable_determinism()`: seeding and deterministic ops (or why not).
- `quiet_retracing()`: silences retracing warnings (TensorFlow; a no-op elsewhere).
- `is_out_of_memory(exc)`, `out_of_memory_hint(rows, what)`: the framework's OOM, re-raised.

Score-based steps (`search.py`, see `common/search.py`):
- `compile_search(objective, propose, keep, draws)`: a step of forward passes with device draws.
- `seed_state(seed)`, `uniform(shape, seed)`: the seed a state carries; a draw and the next seed.

Training steps (`train_step.py`):
- `wrap_train_step(model, metric, norms_fn)`: `(train_step, test_step)` recording the step's norms.
- `plain_train_step(metric, step_cls, model)`: the class's step untouched (quiet on TF and JAX).
- `values_before_step(model, args, variables)`: optimizer variables' values before the step.
- `metric_values_before_step(model, args, variables)`: metric variables' values before the step.
- `input_ascent(forward, loss_of, x, update, steps)`: adversarial training's inner attack.

In-step norms and statistics (`norms.py`, see `common/norm_values.py`, `common/weight_stats.py`):
- `group_norms(grads, matrix, last)`: `sqrt(matrix @ [|g_i|^2..., last])`, an opaque value.
- `divide_norms(values, scale)`, `applied_norms(values, iteration, steps)`: unscaled; applied steps.
- `add_norms(sums, host_sums, values)`, `norm_means(sums, host_sums, names, last, host_last)`: the means.
- `assign_add(variable, value)`: the cheapest in-step `variable += value`.
- `weight_stats(grads, before, after, columns, shapes, clip, half)`: the per-weight table of a step.
- `cond(predicate, true_fn, size)`: `true_fn()` or `size` zeros; only one branch runs.

Data parallelism and processes (`distribution.py`, see `common/processes.py`):
- `batch_multiple()`, `distribute_batch(structure)`: rows per device; the batch sharded (JAX).
- `start_processes()`, `processes()`, `all_gather(obj)`: the launcher's process group.
- `mesh_spans_processes()`, `key_value()`: a mesh over several processes (JAX); the store (PyTorch).

Fast paths (`fast_paths.py`; None on TensorFlow and JAX, whose compiled steps fuse their buffers):
- `linf_step(x, x0, g, size, eps, bounds)`: the Linf projected step in the gradient's memory.
- `apgd_linf_step(x, x_prev, x0, g, eta, a, eps, bounds, active)`: APGD's Linf proposal in place.
- `linf_window(best, ends, in_rows, in_cols, tolerance, signs)`: the Square Attack's Linf candidate.

Summaries (`common/summaries.py`, every backend):
- `summaries_available()`, `write_histograms(log_dir, items, step)`: TensorBoard histograms.
"""

import keras

NAME = keras.backend.backend()
if NAME == "tensorflow":
    from gradkit.backend import tensorflow as _impl
elif NAME == "jax":
    from gradkit.backend import jax as _impl
elif NAME == "torch":
    from gradkit.backend import torch as _impl
else:  # pragma: no cover - numpy/openvino have no autodiff
    raise ImportError(
        "gradkit needs a Keras backend with automatic differentiation: "
        f"tensorflow, jax or torch. Received: KERAS_BACKEND={NAME!r}"
    )

STEPS_RUN_EAGERLY = _impl.STEPS_RUN_EAGERLY
ROW_QUANTUM = _impl.ROW_QUANTUM
DATA_PARALLEL = _impl.DATA_PARALLEL
UNSEEDED_LAYERS_DRAW_GLOBALLY = _impl.UNSEEDED_LAYERS_DRAW_GLOBALLY
ITERATIONS_IN_STATE_ONCE_BUILT = _impl.ITERATIONS_IN_STATE_ONCE_BUILT
COUNTER_READABLE_BETWEEN_CALLS = _impl.COUNTER_READABLE_BETWEEN_CALLS
to_tensor = _impl.to_tensor
to_numpy = _impl.to_numpy
variable_values = _impl.variable_values
compile_grad = _impl.compile_grad
compile_forward = _impl.compile_forward
compile_step = _impl.compile_step
stateless_call = _impl.stateless_call
wrap_module = _impl.wrap_module
set_random_seed = _impl.set_random_seed
enable_determinism = _impl.enable_determinism
quiet_retracing = _impl.quiet_retracing
is_out_of_memory = _impl.is_out_of_memory
out_of_memory_hint = _impl.out_of_memory_hint
compile_search = _impl.compile_search
seed_state = _impl.seed_state
uniform = _impl.uniform
wrap_train_step = _impl.wrap_train_step
plain_train_step = _impl.plain_train_step
values_before_step = _impl.values_before_step
metric_values_before_step = _impl.metric_values_before_step
input_ascent = _impl.input_ascent
group_norms = _impl.group_norms
weight_stats = _impl.weight_stats
assign_add = _impl.assign_add
add_norms = _impl.add_norms
divide_norms = _impl.divide_norms
applied_norms = _impl.applied_norms
norm_means = _impl.norm_means
cond = _impl.cond
batch_multiple = _impl.batch_multiple
distribute_batch = _impl.distribute_batch
start_processes = _impl.start_processes
processes = _impl.processes
all_gather = _impl.all_gather
mesh_spans_processes = _impl.mesh_spans_processes
key_value = _impl.key_value
linf_step = _impl.linf_step
apgd_linf_step = _impl.apgd_linf_step
linf_window = _impl.linf_window
summaries_available = _impl.summaries_available
write_histograms = _impl.write_histograms

__all__ = [
    "NAME",
    "STEPS_RUN_EAGERLY",
    "ROW_QUANTUM",
    "DATA_PARALLEL",
    "UNSEEDED_LAYERS_DRAW_GLOBALLY",
    "ITERATIONS_IN_STATE_ONCE_BUILT",
    "COUNTER_READABLE_BETWEEN_CALLS",
    "to_tensor",
    "to_numpy",
    "variable_values",
    "compile_grad",
    "compile_forward",
    "compile_step",
    "stateless_call",
    "wrap_module",
    "set_random_seed",
    "enable_determinism",
    "quiet_retracing",
    "is_out_of_memory",
    "out_of_memory_hint",
    "compile_search",
    "seed_state",
    "uniform",
    "wrap_train_step",
    "plain_train_step",
    "values_before_step",
    "metric_values_before_step",
    "input_ascent",
    "group_norms",
    "weight_stats",
    "assign_add",
    "add_norms",
    "divide_norms",
    "applied_norms",
    "norm_means",
    "cond",
    "batch_multiple",
    "distribute_batch",
    "start_processes",
    "processes",
    "all_gather",
    "mesh_spans_processes",
    "key_value",
    "linf_step",
    "apgd_linf_step",
    "linf_window",
    "summaries_available",
    "write_histograms",
]
