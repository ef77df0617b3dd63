"""A `torch.nn.Module` as the Keras model gradkit takes (`from_torch`): one `TorchModuleWrapper` layer.

The module runs on Keras' PyTorch backend only; on the others `from_torch` says so in one line before it
touches the module (TensorFlow and PyTorch in one process can crash it outright).
"""

import keras

from gradkit import _checks, backend


def from_torch(module, input_shape, *, state_dict=None, name=None):
    """`module` wrapped in `keras.layers.TorchModuleWrapper` as a `keras.Model` gradkit can evaluate.

    The output shape Keras needs is read from one forward pass on zeros (eval mode, no gradient); the
    module keeps its own layout (images channels first, `(C, H, W)`, as torch layers read them), so the
    data must be laid out so too. The model's variables are the module's parameters themselves: training
    either one trains both. A forward that ends in a softmax is recognised (its rows are probabilities),
    so attacks read the log-probabilities and `evaluate` reports the `probabilities` flag, as for a Keras
    softmax.

    Args:
        module: a `torch.nn.Module` (moved to Keras' device) that maps a float32 batch
            `(n, *input_shape)` to one tensor, the class scores `(n, n_classes)`.
        input_shape: tuple of int, the shape of one input without the batch axis, e.g. `(1, 28, 28)`.
        state_dict: None (the module's current weights), a mapping of parameter names to tensors
            (`module.state_dict()`), or the path of a `.pt`/`.pth` file holding one, read with
            `torch.load(weights_only=True)` (a training checkpoint's "state_dict" or
            "model_state_dict" entry, and the "module." prefix of `DataParallel`, are taken too).
            Defaults to None.
        name: the model's name. Defaults to None (the module's class name).

    Returns:
        keras.Model: input `input_shape`, one output (the module's), float32.

    Raises:
        ValueError: the Keras backend is not PyTorch (set KERAS_BACKEND=torch before importing Keras);
            a bad `input_shape` (the module's forward fails on it); a `state_dict` that does not fit
            the module or cannot be read.
        TypeError: `module` is not a `torch.nn.Module`; `input_shape` is not a tuple of ints.
    """
    if backend.wrap_module is None:
        raise ValueError(
            "`module` (a torch.nn.Module) runs on the PyTorch backend only: set KERAS_BACKEND=torch "
            f"before importing Keras. Received: KERAS_BACKEND={keras.backend.backend()!r}"
        )
    if not isinstance(input_shape, (tuple, list)) or not all(_checks.is_int(d) for d in input_shape):
        _checks.fail("input_shape", "a tuple of ints (one input, no batch axis)", input_shape, TypeError)
    if not input_shape or min(input_shape) < 1:
        _checks.fail("input_shape", "a non-empty tuple of positive ints", tuple(input_shape))
    if name is not None and not isinstance(name, str):
        _checks.fail("name", "a str or None", name, TypeError)
    return backend.wrap_module(module, tuple(int(d) for d in input_shape), state_dict, name)
