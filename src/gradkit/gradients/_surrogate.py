"""BPDA: an attack's gradient taken through a differentiable surrogate of the model.

The Backward Pass Differentiable Approximation (Athalye, Carlini & Wagner 2018) attacks a model whose
forward pass cuts or shatters the gradient (input quantization, a JPEG step, thresholding) by running
the real forward pass and differentiating an approximation g(x) ~ f(x) on the way back. With the
surrogate's logits s and the model's logits z, the attack objective reads the straight-through logits
`stop_gradient(z) + s - stop_gradient(s)`: their value is z (the loss, the step-size rule and every
success are the real model's), their input gradient is the surrogate's.

References:
    Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security: circumventing
    defenses to adversarial examples", ICML, sec. 4.1, https://arxiv.org/abs/1802.00420
"""

import keras
import numpy as np
from keras import ops

from gradkit import _checks
from gradkit.gradients._batches import predict_batched
from gradkit.gradients._decision import outputs_are_logits
from gradkit.gradients._ensemble import as_ensemble
from gradkit.gradients._outputs import output_index


def straight_through(real, approximation):
    """Logits whose value is `real` and whose gradient is that of `approximation` (same shape)."""
    return ops.stop_gradient(real) + approximation - ops.stop_gradient(approximation)


def surrogate_is_logits(surrogate, model, index):
    """Whether the surrogate's output is logits: a Keras model's by its own final activation
    (`outputs_are_logits`), a callable's as the attacked `model`'s output at `index` reads."""
    if isinstance(surrogate, keras.Model):
        return outputs_are_logits(surrogate, output_index(surrogate, None))
    return outputs_are_logits(model, index)


def call_surrogate(surrogate, x):
    """The surrogate's output on `x` (a Keras model in inference mode, or the callable)."""
    if isinstance(surrogate, keras.Model):
        return surrogate(x, training=False)
    return surrogate(x)


def check_surrogate(surrogate, model, x, output=None):
    """`surrogate` checked against the model on the first rows of validated `x`, before any attack.

    Raises:
        TypeError: `surrogate` is neither None, a Keras model nor a callable.
        ValueError: its output's shape differs from the model's (the attacked output's).
    """
    if surrogate is None:
        return None
    if not callable(surrogate):
        _checks.fail("surrogate", "None, a Keras model or a callable on tensors", surrogate, TypeError)
    first = as_ensemble(model).models[0]
    rows = x[:2]
    flat = keras.tree.flatten(predict_batched(first, rows, 2))
    expected = np.shape(flat[output_index(first, output) if len(flat) > 1 else 0])
    try:
        out = call_surrogate(surrogate, keras.ops.convert_to_tensor(rows))
        got = np.shape(keras.ops.convert_to_numpy(out))
    except Exception as error:  # noqa: BLE001 - the user's callable: its error, named
        _checks.fail("surrogate", f"callable on a tensor of shape {rows.shape}", f"a call raising {error!r}")
    if tuple(got) != tuple(expected):
        _checks.fail(
            "surrogate",
            f"a model or callable whose output has the model's shape {tuple(expected)}",
            f"<output of shape {tuple(got)}>",
        )
    return surrogate
