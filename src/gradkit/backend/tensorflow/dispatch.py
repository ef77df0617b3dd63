"""Calling an attack step's `tf.function` without its per-call argument matching.

A `tf.function` call binds its arguments to the function's type, canonicalizes every leaf of them and
looks the concrete function up before it runs: for an attack step's nested dicts of 12 to 31 tensors,
as much time as a small batch's whole step on a near-free model. `dispatcher(function)` keeps the
concrete function of each argument signature (the nesting, every tensor's shape and dtype, which
variables repeat), traced by `function` itself (its trace counts are unchanged), and runs it on the
flattened tensors (`ConcreteFunction._call_flat`, the call `tf.function` ends in). Arguments with a
leaf that is no tensor, variable or None, and calls inside a graph, go through `function` as before.
"""

import tensorflow as tf


def _signature(a):
    """A hashable key of `a`'s nesting and of each tensor's shape and dtype; TypeError for other leaves."""
    if isinstance(a, dict):
        return tuple((key, _signature(a[key])) for key in sorted(a))
    if isinstance(a, (list, tuple)):
        return type(a), tuple(_signature(v) for v in a)
    if a is None:
        return None
    if isinstance(a, (tf.Tensor, tf.Variable)):
        return tuple(a.shape), a.dtype
    raise TypeError(type(a))


def _inputs(args):
    """The concrete function's inputs, in order: the tensors, and each variable's handle at its first
    place (a variable given twice is one input, as in TensorFlow's own binding); and the pattern of
    the variables' repeats, part of the signature."""
    inputs, seen, pattern = [], {}, []
    for t in tf.nest.flatten(args):
        if isinstance(t, tf.Variable):
            repeat = id(t) in seen
            pattern.append(seen.setdefault(id(t), len(seen)))
            if repeat:
                continue
            t = t.handle
        if t is not None:
            inputs.append(t)
    return inputs, tuple(pattern)


def dispatcher(function):
    """`call(*args)`: `function(*args)` (a `tf.function` of positional arguments), through the concrete
    function of the arguments' signature."""
    concretes = {}

    def call(*args):
        if not tf.executing_eagerly():
            return function(*args)
        try:
            key = _signature(args)
        except TypeError:
            return function(*args)
        inputs, pattern = _inputs(args)
        concrete = concretes.get((key, pattern))
        if concrete is None:
            concrete = concretes[key, pattern] = function.get_concrete_function(*args)
        return concrete._call_flat(inputs, concrete.captured_inputs)

    return call
