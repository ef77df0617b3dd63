"""JAX's noise scale: the step's own gradient taken as the gradients of its batch's two halves.

Keras' JAX `train_step` differentiates `model.compute_loss_and_updates` w.r.t. the trainable values it is
given. `split_step` gives it the pair `(values, values)` and, for that one call, a loss that runs the
first `b1 = b // 2` rows with the first copy and the other rows with the second:

    L = (b1 / b) L_1(w_a) + (b2 / b) L_2(w_b),        b2 = b - b1,

where L_i is Keras' training loss on half i (a mean over its rows, plus the rows-independent
regularization terms). At w_a = w_b = w, L is the loss of the whole batch, and its gradient w.r.t. the
pair is `(g_a, g_b) = ((b1 / b) G_1, (b2 / b) G_2)`: the step applies `G = g_a + g_b`, the batch's
gradient (the same numbers up to float rounding: two half-batch products summed instead of one), and
the noise scale reads `G_1 = (b / b1) g_a` and `G_2 = (b / b2) g_b` from the same backward pass, with
no extra forward or backward pass (`gradkit.monitor`'s noise scale). Per-row predictions are
concatenated back, so the step's loss tracker and compiled metrics see the whole batch.

This is exact only where the loss is a mean over rows plus rows-independent terms and no layer mixes
rows or draws randomness: `splittable` checks that (no non-trainable variables, so no BatchNorm
statistics and no seed states; Keras' own `train_step` and `compute_loss`; losses reduced with
"sum_over_batch_size"; no activity regularizers). Elsewhere the first half's gradient comes from an
extra pass (`halves_of`, `common/halves.py`), which leaves the step untouched.
"""

import jax
import jax.numpy as jnp
import keras
from keras.src.backend.jax.trainer import JAXTrainer

from gradkit.backend.common.halves import first_half, half_loss, mean_reduced


def splittable(model, step_cls, data):
    """Whether `split_step` gives `model`'s exact step on `data` (see the module docstring)."""
    x = keras.utils.unpack_x_y_sample_weight(data)[0]
    rows = keras.tree.flatten(x)[0].shape[0]
    if rows is None or rows < 2 or model.non_trainable_variables:
        return False
    if step_cls.train_step is not JAXTrainer.train_step:
        return False
    if step_cls.compute_loss is not keras.Model.compute_loss:
        return False
    if any(getattr(layer, "activity_regularizer", None) is not None for layer in model._flatten_layers()):
        return False
    losses = keras.tree.flatten(getattr(model, "loss", None))
    if not losses:
        return False
    return all(mean_reduced(loss) for loss in losses)


def _cut(data, start, stop):
    return keras.tree.map_structure(lambda t: None if t is None else t[start:stop], data)


def split_step(model, step_cls, state, data):
    """Keras' `train_step` on the pair of trainable values; `(logs, new_state)`. The optimizer's
    `stateless_apply` receives `grads = (g_a, g_b)` and `trainable = (values, values)`: the caller's
    capturing apply sums them (`combine`)."""
    rows = keras.tree.flatten(keras.utils.unpack_x_y_sample_weight(data)[0])[0].shape[0]
    b1 = rows // 2
    weights = (b1 / rows, (rows - b1) / rows)
    compute = step_cls.compute_loss_and_updates.__get__(model)

    def split_loss(pair, non_trainable, metrics, x, y, sample_weight, training=False, **kwargs):
        outs = []
        for values, (start, stop) in zip(pair, ((0, b1), (b1, rows))):
            part = _cut((x, y, sample_weight), start, stop)
            loss, aux = compute(values, non_trainable, metrics, *part, training=training, **kwargs)
            _, _, non_trainable, metrics = aux
            outs.append((loss, aux))
        (la, (ua, pa, _, _)), (lb, (ub, pb, _, _)) = outs
        y_pred = keras.tree.map_structure(lambda a, b: jnp.concatenate([a, b], axis=0), pa, pb)
        unscaled = weights[0] * ua + weights[1] * ub
        return weights[0] * la + weights[1] * lb, (unscaled, y_pred, non_trainable, metrics)

    pair = (list(state[0]), list(state[0]))
    object.__setattr__(model, "compute_loss_and_updates", split_loss)
    try:
        return step_cls.train_step(model, (pair, *state[1:]), data)
    finally:
        object.__delattr__(model, "compute_loss_and_updates")


def combine(grads, trainable, rows):
    """From the pair's gradients: `(G, G_1, G_2, trainable values)`, G the step's gradient."""
    g_a, g_b = grads
    b1 = rows // 2
    full = [a + b for a, b in zip(g_a, g_b)]
    first = [a * (rows / b1) for a in g_a]
    other = [b * (rows / (rows - b1)) for b in g_b]
    return full, first, other, trainable[0]


def split_rows(data):
    """The batch size of `data` (an int: JAX shapes are static)."""
    return int(keras.tree.flatten(keras.utils.unpack_x_y_sample_weight(data)[0])[0].shape[0])


def halves_of(model, state, data, scale):
    """The thunk for the halves' gradient where the step is not split: `(g1, b1, b)`, the gradient of
    the loss on the first half of `data` at the step's input state, scaled by `scale` as the step's own
    (`common/halves.py`)."""

    def halves():
        half, b1, b = first_half(data)
        if b1 == 0:  # a batch of one row: no half (the caller refuses it or leaves the step out)
            return [jnp.zeros_like(t) for t in state[0]], b1, b
        loss = lambda t: half_loss(model, t, state[1], state[3], half, scale)  # noqa: E731
        return list(jax.grad(loss)(list(state[0]))), b1, b

    return halves
