"""Gradient-norm diagnostics: `gradient_norm` on one batch, and `grad_norm` in the logs of training.

`gradient_norm(model, x, y)` is the L2 norm of the gradient `fit` would apply (global, or per top-level
layer). `track_gradient_norm(model)` (or `GradientNormCallback` in `fit`) makes the model's training step
hand the gradients it gives the optimizer to a small Keras metric, so `grad_norm` (and with
`per_layer=True`, `grad_norm/<layer name>`) appears like any metric: progress bar, `History.history`,
`CSVLogger` columns, TensorBoard scalars and `train_on_batch(..., return_dict=True)`, with no second
forward or backward pass. The callback also keeps every step's value and can write per-layer gradient
histograms to TensorBoard (`histogram_freq=`).

`include=` (on both) adds groups of keys, all computed inside the step from the tensors it already has
(the gradients the optimizer received, the weights it read and wrote), each also per layer as
`"<key>/<layer name>"` (one TensorBoard panel per key). A global value is over every trainable weight
together (norms: the square root of the sum of squares, never a sum of per-layer norms):

- "norm": `grad_norm` (the default group; below);
- "clipped": `grad_norm_clipped`, the norm of the gradient the update used, after the optimizer's
  `clipnorm` (per weight), `global_clipnorm` or `clipvalue`, and `clip_fraction`, the share of
  recorded steps on which that clipping changed the gradient (per layer: a gradient of that layer);
- "params": `param_norm`, the L2 norm of the weights the step read, before its update;
- "updates": `update_norm`, the L2 norm of the weight change the step applied, whatever the
  optimizer (weight decay and constraints included), and `update_ratio` = update_norm / param_norm
  (about 1e-3 is the usual healthy figure; You et al. 2017, LARS);
- "health": `grad_max` (max |g|), `grad_nonfinite` (the count of NaN and inf entries) and
  `grad_zero_fraction` (the share of exact zeros: dead units);
- "noise_scale": `noise_scale`, the gradient noise scale B_simple = tr(Sigma) / |G|^2 of McCandlish
  et al. (2018), in rows (the batch size beyond which larger batches stop paying), estimated from
  the gradients of the two halves of each recorded step's batch (where the backend cannot take the
  first half's from the step's own backward pass, one more forward and backward pass over half the
  rows, inside the step), each term smoothed by a bias-corrected exponential moving average over the
  recorded steps (beta 0.99) and logged as the ratio after the last step, not an epoch mean
  (`_noise_scale` gives the estimator). Batches need at least 2 rows;
- "all": every group above (noise_scale included: mind its extra pass).

Semantics of the logged values:

- `grad_norm` of a step is the global L2 norm of the gradient of that step's loss (the loss `fit`
  minimizes, regularization included), in float32, BEFORE clipping (`clipnorm`, `global_clipnorm`,
  `clipvalue` act inside the optimizer) and with the loss-scale factor of mixed precision
  (`LossScaleOptimizer.dynamic_scale`, or an optimizer's `loss_scale_factor`) divided out. It equals
  `gradient_norm` on the same weights and batch. Every gradient-based key is likewise taken after
  unscaling (mixed precision changes none of them).
- The logged value is the plain mean of the step values since the metrics were last reset: the
  running mean during an epoch, the epoch mean in `History`. Each step counts once, whatever its
  batch size (Keras weights `loss` by batch size instead, so a short last batch counts less there).
  `train_on_batch` resets the metrics by default, so there it is the norm of that batch.
- `every_n_steps=n` records only every n-th applied update (the first, the (n+1)-th, ..., counted by
  the optimizer across `fit` calls). The other steps run the model class's own training step,
  untouched, where the host knows each step's index (`_chosen_steps`); with `steps_per_execution`
  > 1 or a `LossScaleOptimizer` (which leaves its counter alone on the steps it skips), and on the
  steps that only accumulate gradients, the tracked step runs and skips the computation (a traced
  conditional on TensorFlow and JAX, a Python `if` on PyTorch, where the weights are then not
  copied either).
- With `gradient_accumulation_steps=k`, values exist only for steps that update the weights: those
  of the applied update (its gradient is the mean of the k accumulated ones; its weights, change and
  clipping are the update's); the other steps are not counted. Where no step has counted since the
  metrics were reset (a `train_on_batch` that only accumulates, the first steps of an epoch), the
  logged values are those of the last applied update, NaN before any: never a made-up 0. The same
  holds for the steps that `every_n_steps` skips.
- With `steps_per_execution=k` (TensorFlow, JAX), the logs of a call hold the running mean after
  its k steps.
- NaN and inf are reported as such (one bad step makes the epoch mean NaN/inf). Under dynamic loss
  scaling, steps that the LossScaleOptimizer skips for overflow therefore show inf or NaN.
- Evaluation (`validation_data`, `evaluate`) reports no `grad_norm`.
- Cost: the norms are a few operations per step on the gradients already in memory (one reduction
  per weight, one product, the metric update). TensorFlow and JAX compile them into the step; on
  PyTorch they run eagerly right after `optimizer.apply`, which assumes the optimizer leaves the
  gradient tensors unchanged (every Keras optimizer does; each is tested). On PyTorch's CPU the
  squared norms then come to the host, and the sums and means are Python arithmetic (float64):
  there `grad_norm` reaches the logs as a Python float. The other groups add a few reductions per
  weight ("health": three elementwise passes over the gradients; "updates": on TensorFlow and
  PyTorch a copy of the weights before the update, which writes them in place).

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063.
    You, Gitman & Ginsburg (2017), "Large Batch Training of Convolutional Networks" (LARS: the
    update/weight norm ratio), https://arxiv.org/abs/1708.03888.
    McCandlish, Kaplan, Amodei & OpenAI Dota Team (2018), "An Empirical Model of Large-Batch
    Training", Appendix A.1 (the noise scale), https://arxiv.org/abs/1812.06162.
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
