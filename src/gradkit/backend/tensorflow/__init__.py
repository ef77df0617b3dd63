"""The TensorFlow backend: `tf.function` and `tf.GradientTape` (see `gradkit.backend` for the interface).

Modules: `core` (compiling, conversions, the capabilities), `search` (score-based steps), `train_step`,
`norms`, `noise_scale`, `distribution` (none), `fast_paths` (none); TensorFlow's own: `dispatch` (calling
a step's `tf.function` without its argument matching) and `retracing` (its warnings filtered).
"""

from gradkit.backend.tensorflow.core import STEPS_RUN_EAGERLY
from gradkit.backend.tensorflow.core import ROW_QUANTUM
from gradkit.backend.tensorflow.core import DATA_PARALLEL
from gradkit.backend.tensorflow.core import UNSEEDED_LAYERS_DRAW_GLOBALLY
from gradkit.backend.tensorflow.core import ITERATIONS_IN_STATE_ONCE_BUILT
from gradkit.backend.tensorflow.core import COUNTER_READABLE_BETWEEN_CALLS
from gradkit.backend.tensorflow.core import to_tensor
from gradkit.backend.tensorflow.core import to_numpy
from gradkit.backend.tensorflow.core import variable_values
from gradkit.backend.tensorflow.core import compile_grad
from gradkit.backend.tensorflow.core import compile_forward
from gradkit.backend.tensorflow.core import compile_step
from gradkit.backend.tensorflow.core import stateless_call
from gradkit.backend.tensorflow.core import wrap_module
from gradkit.backend.tensorflow.core import set_random_seed
from gradkit.backend.tensorflow.core import enable_determinism
from gradkit.backend.tensorflow.core import quiet_retracing
from gradkit.backend.tensorflow.core import is_out_of_memory
from gradkit.backend.tensorflow.core import out_of_memory_hint
from gradkit.backend.tensorflow.search import compile_search
from gradkit.backend.tensorflow.search import seed_state
from gradkit.backend.tensorflow.search import uniform
from gradkit.backend.tensorflow.train_step import wrap_train_step
from gradkit.backend.tensorflow.train_step import plain_train_step
from gradkit.backend.tensorflow.train_step import values_before_step
from gradkit.backend.tensorflow.train_step import metric_values_before_step
from gradkit.backend.tensorflow.train_step import input_ascent
from gradkit.backend.tensorflow.norms import group_norms
from gradkit.backend.tensorflow.norms import weight_stats
from gradkit.backend.tensorflow.norms import assign_add
from gradkit.backend.tensorflow.norms import add_norms
from gradkit.backend.tensorflow.norms import divide_norms
from gradkit.backend.tensorflow.norms import applied_norms
from gradkit.backend.tensorflow.norms import norm_means
from gradkit.backend.tensorflow.norms import cond
from gradkit.backend.tensorflow.distribution import batch_multiple
from gradkit.backend.tensorflow.distribution import distribute_batch
from gradkit.backend.tensorflow.distribution import start_processes
from gradkit.backend.tensorflow.distribution import processes
from gradkit.backend.tensorflow.distribution import all_gather
from gradkit.backend.tensorflow.distribution import mesh_spans_processes
from gradkit.backend.tensorflow.distribution import key_value
from gradkit.backend.tensorflow.fast_paths import linf_step
from gradkit.backend.tensorflow.fast_paths import apgd_linf_step
from gradkit.backend.tensorflow.fast_paths import linf_window
from gradkit.backend.common.summaries import summaries_available
from gradkit.backend.common.summaries import write_histograms

__all__ = [
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
