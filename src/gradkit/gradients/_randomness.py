"""Randomness of a model's forward pass at inference: its seed states, fresh draws per call, and the
expectation over transformation (EOT) of an attack objective.

A Keras layer draws its randomness (`keras.random.normal(..., seed=self.seed_generator)`) from the
state `[seed, counter]` of a `keras.random.SeedGenerator`, a non-trainable variable of the model. A
compiled attack step calls the model statelessly with the variable values it is given, so every call
with the same values repeats the same draw. Two things make the draws of an attack those of the
model: `advanced` moves every seed state on in the values a call reads (each call, like each
`model.predict`, sees new randomness; the model's variables stay as they are), and `expectation`
threads the seed states through the `eot_iter` forward passes of one step (each pass a new draw).

References:
    Athalye, Engstrom, Ilyas & Kwok (2018), "Synthesizing robust adversarial examples", ICML,
    https://arxiv.org/abs/1707.07397 (Expectation over Transformation)
    Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security", ICML, sec. 4.3,
    https://arxiv.org/abs/1802.00420
"""

import keras
import numpy as np

from gradkit import _keras_internals, backend

STRIDE = 1 << 16  # the counter's advance per call: the draws of one call (EOT passes) never overlap


def seed_indices(variable_lists):
    """Per member, the positions of its seed states in its non-trainable variables (`[]` for none).

    `variable_lists`: `[(trainable_variables, non_trainable_variables)]` per member."""
    return [[i for i, v in enumerate(n) if _keras_internals.is_seed_state(v)] for _, n in variable_lists]


def advanced(variable_lists, indices, values, draws):
    """`values` (per member, the values of its non-trainable variables) with every seed state `[seed,
    counter]` moved on by `draws * STRIDE` draws, so that this call reads a draw no earlier call read;
    the model's own variables are left as they are (an attack changes no model variable)."""
    values = [list(v) for v in values]
    for (_, non_trainables), positions, member in zip(variable_lists, indices, values):
        for i in positions:
            value = np.asarray(keras.ops.convert_to_numpy(non_trainables[i].value))
            wrap = min(int(np.iinfo(value.dtype).max) + 1, 1 << 32)  # uint32, int32 (PyTorch), int64
            moved = value.astype(np.int64)
            moved[-1] = (moved[-1] + draws * STRIDE) % wrap
            member[i] = backend.to_tensor(moved.astype(value.dtype))
    return values


def expectation(draw, values, logits, state, eot_iter):
    """The mean of `values` over `eot_iter` draws and the last draw's logits: `draw(state) -> (values,
    logits, state)` is called `eot_iter - 1` more times after the first `(values, logits, state)`, the
    seed states threaded from call to call (each a new draw), in `keras.ops.fori_loop`."""
    state = keras.tree.map_structure(keras.ops.convert_to_tensor, state)

    def body(_, carry):
        total, _, state = carry
        values, logits, state = draw(state)
        return total + values, logits, keras.tree.map_structure(keras.ops.convert_to_tensor, state)

    total, logits, state = keras.ops.fori_loop(1, eot_iter, body, (values, logits, state))
    return total / eot_iter, logits, state
