"""Gradient-norm diagnostics: `gradient_norm` on one batch, and `grad_norm` in the logs of training.

`gradient_norm(model, x, y)` is the L2 norm of the gradient `fit` would apply (global, or per top-level
layer). `track_gradient_norm(model)` (or `GradientNormCallback` in `fit`) makes the model's training step
hand the gradients it gives the optimizer to a small Keras metric, so `grad_norm` and the other keys of
`include=` (clipped norm, weight and update norms, gradient health, the gradient noise scale) appear like
any metric, with no second forward or backward pass; the callback also keeps every step's value and can
write per-layer gradient histograms to TensorBoard. The keys' definitions and the semantics of the
logged values (mixed precision, gradient accumulation, `every_n_steps`, NaN and inf) are in
`track_gradient_norm`'s docstring.

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
