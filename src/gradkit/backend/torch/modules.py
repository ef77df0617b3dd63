"""`torch.nn.Module`s wrapped in `keras.layers.TorchModuleWrapper`, run on the values gradkit passes.

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

import keras

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
