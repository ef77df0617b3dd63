"""PyTorch's noise scale: the step's own gradient taken as the gradients of its batch's two halves.

Keras' PyTorch `train_step` calls the model on the batch, takes the loss and `loss.backward()`, then
hands the variables' `.grad` to the optimizer. `SplitForward` makes that one call run the first
`b1 = b // 2` rows with `w_a`, leaf tensors that share the weights' storage (no copy), and the other rows with
the weights themselves (a wrapped torch module's parameter slots hold the leaves for the first call,
`modules.bound`: it reads no Keras scope), then concatenates the predictions: the loss, the loss tracker
and the metrics see the whole batch as before, and the one backward pass leaves `g_a = (b1 / b) G_1` in
the leaves' `.grad` and `g_b = (b2 / b) G_2` in the weights' (G_i the gradient of half i's mean loss).
`finish` adds g_a into the weights' gradients in place, so the optimizer applies `G = g_a + g_b`, the
batch's gradient (the same numbers up to float rounding), and returns `G_1`: no extra forward or
backward pass for the noise scale (as JAX's `noise_scale.py`).

Exact only where the loss is a mean over rows and no layer mixes rows, draws randomness or adds a loss
(a weight regularizer's gradient would land in g_b alone): `splittable` checks that (no non-trainable
variables, no wrapped module's buffers, no regularizers, Keras' own `train_step` and `compute_loss`,
"sum_over_batch_size" losses). Elsewhere the first half's gradient comes from an extra pass (`halves`,
`common/halves.py`).
"""

import keras
import torch
from keras.src.backend.torch.trainer import TorchTrainer

from gradkit.backend.common.halves import first_half, half_loss, mean_reduced
from gradkit.backend.torch import modules


def splittable(model, step_cls, data):
    """Whether `SplitForward` gives `model`'s exact step on `data` (see the module docstring)."""
    x = keras.utils.unpack_x_y_sample_weight(data)[0]
    flat = keras.tree.flatten(x)
    if len(flat) != 1 or flat[0].shape[0] < 2 or model.non_trainable_variables:
        return False
    if modules.bindings(model)[1]:  # a wrapped module's buffers (BatchNorm's statistics): Keras sees none
        return False
    if step_cls.train_step is not TorchTrainer.train_step:
        return False
    if step_cls.compute_loss is not keras.Model.compute_loss:
        return False
    for layer in model._flatten_layers():
        names = ("activity_regularizer", "kernel_regularizer", "bias_regularizer", "regularizer")
        if any(getattr(layer, name, None) is not None for name in names):
            return False
    losses = keras.tree.flatten(getattr(model, "loss", None))
    return bool(losses) and all(mean_reduced(loss) for loss in losses)


class SplitForward:
    """Context manager over one `train_step`: the model's `call` runs the halves (module docstring)."""

    def __init__(self, model, variables):
        self.model, self.variables = model, list(variables)
        self.leaves = None

    def __enter__(self):
        call = type(self.model).call.__get__(self.model)
        self.leaves = [v.value.detach().requires_grad_(True) for v in self.variables]
        mapping = list(zip(self.variables, self.leaves))

        def split_call(inputs, *args, **kwargs):
            b1 = inputs.shape[0] // 2
            with modules.bound(self.model, self.leaves, []), keras.StatelessScope(state_mapping=mapping):
                first = call(inputs[:b1], *args, **kwargs)
            other = call(inputs[b1:], *args, **kwargs)
            return keras.tree.map_structure(lambda a, b: torch.cat([a, b], dim=0), first, other)

        object.__setattr__(self.model, "call", split_call)
        return self

    def __exit__(self, *exc):
        object.__delattr__(self.model, "call")
        return False

    def finish(self, grads, rows):
        """Adds g_a into `grads` (in place) and returns `(G_1, b1, b)` (G_1 in the leaves' buffers)."""
        b1 = rows // 2
        g_a = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in self.leaves]
        with torch.no_grad():
            present = [i for i, g in enumerate(grads) if g is not None]
            torch._foreach_add_([grads[i] for i in present], [g_a[i] for i in present])
            torch._foreach_mul_(g_a, float(rows) / float(b1))
        return g_a, b1, rows


def half_gradients(model, data, variables, scale):
    """`(g1, b1, b)`: the gradient of the loss on the first half of `data` at the current weights, scaled
    by `scale` as the step's own (`common/halves.py`); taken before the update writes the weights."""
    half, b1, b = first_half(data)
    trainable = [v.value for v in variables]
    if b1 == 0:  # a batch of one row: no half (the caller refuses it or leaves the step out)
        return [torch.zeros_like(t) for t in trainable], 0, int(b)
    non_trainable = [v.value.detach() for v in model.non_trainable_variables]
    metrics = [v.value.detach() for v in model.metrics_variables]
    own = [v.value for v in model.trainable_variables]  # a wrapped module's buffers: copies, dropped
    with torch.enable_grad(), modules.bound(model, own, non_trainable):
        loss = half_loss(model, trainable, non_trainable, metrics, half, scale)
        grads = torch.autograd.grad(loss, trainable, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(trainable, grads)], int(b1), int(b)


def halves(model, data, norms_fn, variables, scale):
    """`{"halves": thunk}` for a `norms_fn` that needs the halves' gradient (else {}): taken now, on
    sampled steps, before the update writes the weights in place; a batch the caller refuses
    (`norms_fn.check_rows`) raises here, before the update."""
    if not getattr(norms_fn, "needs_halves", False):
        return {}
    taken = half_gradients(model, data, list(variables), scale) if norms_fn.sampled() else None
    if taken is not None:
        norms_fn.check_rows(taken[2])
    return {"halves": lambda: taken}
