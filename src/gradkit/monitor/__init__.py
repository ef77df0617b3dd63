"""Gradient-norm diagnostics: `gradient_norm` on one batch, and `grad_norm` in the logs of training.

`gradient_norm(model, x, y)` is the L2 norm of the gradient `fit` would apply (global, or per top-level
layer). `track_gradient_norm(model)` (or `GradientNormCallback` in `fit`) makes the model's training step
hand the gradients it gives the optimizer to a small Keras metric, so `grad_norm` (and with
`per_layer=True`, `grad_norm/<layer name>`) appears like any metric: progress bar, `History.history`,
`CSVLogger` columns, TensorBoard scalars and `train_on_batch(..., return_dict=True)`. There is no second
forward or backward pass. Semantics of the logged value:

- The value of a step is the global L2 norm of the gradient of that step's loss (the loss `fit`
  minimizes, regularization included), in float32, BEFORE clipping (`clipnorm`, `global_clipnorm`,
  `clipvalue` act inside the optimizer) and with the loss-scale factor of mixed precision
  (`LossScaleOptimizer.dynamic_scale`, or an optimizer's `loss_scale_factor`) divided out. It equals
  `gradient_norm` on the same weights and batch.
- The logged value is the plain mean of the step values since the metrics were last reset: the
  running mean during an epoch, the epoch mean in `History`. Each step counts once, whatever its batch
  size (Keras weights `loss` by batch size instead, so a short last batch counts less there).
  `train_on_batch` resets the metrics by default, so there it is the norm of that batch.
- With `gradient_accumulation_steps=k`, a value exists only for steps that update the weights: the norm
  of the update's gradient (the mean of the k accumulated gradients); the other steps are not counted
  (before the first counted step the logged value is 0).
- NaN and inf are reported as such (one bad step makes the epoch mean NaN/inf). Under dynamic loss
  scaling, steps that the LossScaleOptimizer skips for overflow therefore show inf or NaN.
- Evaluation (`validation_data`, `evaluate`) reports no `grad_norm`.
- Cost: the norms are a few operations per step on the gradients already in memory (one reduction per
  weight, one product, the metric update). TensorFlow and JAX compile them into the step; on PyTorch
  they run eagerly right after `optimizer.apply`, which assumes the optimizer leaves the gradient
  tensors unchanged (every Keras optimizer does; each is tested). On PyTorch's CPU the squared norms
  then come to the host, and the sums and means are Python arithmetic (float64): there `grad_norm`
  reaches the logs as a Python float.

Per-layer TensorBoard histograms are not provided: the per-layer norms already reach TensorBoard as
scalars, and histograms of the gradients themselves would need the tensors out of the compiled step.

Modules: `_gradient_norm` (the definition, the layer groups, `gradient_norm`), `_step_norms` (the norms of
one step and their running-mean metric), `_tracking` (wrapping the training step), `_callback`.

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063.
"""

from gradkit.monitor._callback import GradientNormCallback
from gradkit.monitor._gradient_norm import gradient_norm
from gradkit.monitor._tracking import track_gradient_norm
from gradkit.monitor._tracking import untrack_gradient_norm

__all__ = [
    "GradientNormCallback",
    "gradient_norm",
    "track_gradient_norm",
    "untrack_gradient_norm",
]
