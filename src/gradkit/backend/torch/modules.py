"""`torch.nn.Module`s wrapped in `keras.layers.TorchModuleWrapper`: made into Keras models (`wrap_module`),
and run on the values gradkit passes.

Keras' `stateless_call` hands every Keras layer the variable values it is given, but a wrapped module's
`forward` reads its own `torch.nn.Parameter`s (keras#20279): gradients w.r.t. the values passed for them
come out zero, and the module runs on its own weights whatever values were passed. The wrapper's Keras
variables hold the module's parameters themselves (`Variable(initializer=param)` keeps the object), so
each parameter is matched by identity to its variable's position among the model's trainable and
non-trainable variables, and for the duration of the call the module's parameter slots hold the values
passed at those positions (what `torch.func.functional_call` does to one module). The module's buffers
(a wrapped BatchNorm's running statistics, which Keras does not track) are swapped for copies during the
call, so no state of the model changes. Inside a `torch.jit.trace` the swap is recorded as it runs, so
replays read their arguments too.
"""

import contextlib
import os
from collections.abc import Mapping

import keras
import torch

from gradkit import _keras_internals

_CACHE = "_gradkit_torch_modules"


def _wrappers(model):
    """The `TorchModuleWrapper` layers inside `model` (cached on the model: its layers do not change)."""
    cache = vars(model)
    if _CACHE not in cache:
        wrapper = getattr(keras.layers, "TorchModuleWrapper", None)
        layers = _keras_internals.flat_layers(model)
        cache[_CACHE] = [layer for layer in layers if wrapper is not None and isinstance(layer, wrapper)]
    return cache[_CACHE]


def _slot(module, name):
    """`(submodule, attribute)` of a dotted parameter or buffer name of `module`."""
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr


def bindings(model):
    """`([(submodule, attribute, "trainable" | "non_trainable", position)], [(submodule, attribute)])`:
    where each wrapped parameter's value comes from, and the buffers to copy.

    Raises:
        ValueError: a wrapped module's parameter is not one of the model's Keras variables.
    """
    wrappers = _wrappers(model)
    if not wrappers:
        return [], []
    where = {id(v.value): ("trainable", i) for i, v in enumerate(model.trainable_variables)}
    where.update({id(v.value): ("non_trainable", i) for i, v in enumerate(model.non_trainable_variables)})
    params, buffers = [], []
    for layer in wrappers:
        for name, param in layer.module.named_parameters(remove_duplicate=False):
            if id(param) not in where:
                raise ValueError(
                    f"The torch module wrapped in layer {layer.name!r} (TorchModuleWrapper) has a parameter "
                    f"{name!r} of shape {tuple(param.shape)} that is not one of the model's Keras variables "
                    "(replaced or moved after wrapping?), so gradkit cannot differentiate through it. Wrap "
                    "the module again after changing its parameters."
                )
            params.append((*_slot(layer.module, name), *where[id(param)]))
        buffers.extend(_slot(layer.module, name) for name, _ in layer.module.named_buffers())
    return params, buffers


@contextlib.contextmanager
def bound(model, trainable, non_trainable):
    """Inside the block, the wrapped modules of `model` read their parameters from the value lists
    `trainable` and `non_trainable` (in the order of the model's variables) and write their buffers
    into copies."""
    params, buffers = bindings(model)
    values = {"trainable": trainable, "non_trainable": non_trainable}
    saved = [(sub._parameters, attr, sub._parameters[attr]) for sub, attr, _, _ in params]
    saved += [(sub._buffers, attr, sub._buffers[attr]) for sub, attr in buffers]
    try:
        for sub, attr, kind, i in params:
            sub._parameters[attr] = values[kind][i]
        for sub, attr in buffers:
            buffer = sub._buffers[attr]
            sub._buffers[attr] = None if buffer is None else buffer.clone()
        yield
    finally:
        for slots, attr, value in saved:
            slots[attr] = value


def stateless_call(model, trainable, non_trainable, *args, **kwargs):
    """`model.stateless_call(trainable, non_trainable, *args, **kwargs)` with the wrapped torch modules
    running on the values given too (see the module docstring)."""
    if not _wrappers(model):
        return model.stateless_call(trainable, non_trainable, *args, **kwargs)
    with bound(model, trainable, non_trainable):
        return model.stateless_call(trainable, non_trainable, *args, **kwargs)


_NESTED = ("state_dict", "model_state_dict", "model")  # where training checkpoints keep the weights


def _state_dict_from(state_dict):
    """The mapping of tensors `state_dict` gives: itself, or a `.pt`/`.pth` file read by
    `torch.load(weights_only=True)`, or the weights under "state_dict" (...) of a training checkpoint."""
    if isinstance(state_dict, (str, os.PathLike)):
        try:
            state_dict = torch.load(state_dict, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - unpickling, zip and file errors all mean "unreadable"
            raise ValueError(
                f"`state_dict` must be a state_dict file torch.load(weights_only=True) reads (save "
                f"module.state_dict(), not the module). Received: state_dict={str(state_dict)!r} "
                f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
            ) from err
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"`state_dict` must be a mapping or a file. Received: {type(state_dict).__name__}")
    if not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
        nested = [k for k in _NESTED if isinstance(state_dict.get(k), Mapping)]
        if not nested:
            raise ValueError(
                "`state_dict` must map parameter names to tensors (module.state_dict()). Received: keys "
                f"{sorted(map(str, state_dict))[:8]}"
            )
        return _state_dict_from(state_dict[nested[0]])
    return state_dict


def _load(module, state_dict):
    state_dict = dict(_state_dict_from(state_dict))
    own = set(module.state_dict())
    if state_dict and all(k.startswith("module.") for k in state_dict) and not own & set(state_dict):
        state_dict = {k[len("module.") :]: v for k, v in state_dict.items()}  # saved from DataParallel
    try:
        module.load_state_dict(state_dict)
    except RuntimeError as err:
        raise ValueError(
            f"`state_dict` must hold the weights of this module: {' '.join(str(err).split())}"
        ) from err


def wrap_module(module, input_shape, state_dict=None, name=None):
    """`module` (its weights from `state_dict` first) as a `keras.Model` of one `TorchModuleWrapper`,
    whose output shape is read from one forward pass on zeros `(2, *input_shape)` (eval mode, no grad).

    Raises:
        TypeError: `module` is not a `torch.nn.Module`; `state_dict` neither a mapping nor a file.
        ValueError: a `state_dict` that does not fit; a forward pass that fails or returns no tensor.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module. Received: {type(module).__name__}")
    if state_dict is not None:
        _load(module, state_dict)
    module = module.to(_keras_internals.torch_device())
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(torch.zeros((2, *input_shape), device=_keras_internals.torch_device()))
    except Exception as err:  # noqa: BLE001 - whatever the forward raises, the input shape is the suspect
        raised = f"{type(err).__name__}: {' '.join(str(err).split())}"
        raise ValueError(
            f"`input_shape` must be the shape of one input of the module (no batch axis; torch layers "
            f"read images channels first, (C, H, W)). Received: input_shape={tuple(input_shape)} (its "
            f"forward on zeros of shape {(2, *input_shape)} raised {raised})"
        ) from err
    finally:
        module.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"`module` must return one tensor. Received: {type(out).__name__} from its forward")
    inputs = keras.Input(tuple(input_shape), name="input")
    layer = keras.layers.TorchModuleWrapper(module, output_shape=(None, *out.shape[1:]), name="torch_module")
    return keras.Model(inputs, layer(inputs), name=name or type(module).__name__)
