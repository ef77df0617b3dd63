"""Every access to a private Keras attribute, one named function each.

gradkit reads a few attributes Keras 3 keeps private, here only: an upgrade that renames one breaks one
function with one test. Checked against Keras 3.15; each degrades to a documented default if it is gone.
"""

import functools
import sys
import threading

import keras


def is_symbolic(value):
    """True for a symbolic Keras tensor (`model.input`, an intermediate `KerasTensor`)."""
    return isinstance(value, keras.KerasTensor) or hasattr(value, "_keras_history")


def producing_layer(tensor):
    """The layer that produced a symbolic tensor of a Functional model, or None."""
    history = getattr(tensor, "_keras_history", None)
    return history[0] if history else None


def producing_inputs(tensor):
    """The symbolic input tensors of the call that produced `tensor` of a Functional model (a layer shared
    by several graphs has one node per call: this one's), or [] for a graph input or a non-symbolic value."""
    history = getattr(tensor, "_keras_history", None)
    if not history:
        return []
    layer, node_index, _ = history
    return list(layer._inbound_nodes[node_index].input_tensors)


def output_structure(model):
    """The structure a Functional model's call returns (a dict of symbolic outputs keyed as the user built
    it, a list, one tensor), or None where the model has none (Sequential keeps no such structure;
    subclassed models have no symbolic outputs)."""
    return getattr(model, "_outputs_struct", None)


def compiled_loss_weights(model):
    """The `loss_weights` given to `model.compile` (None, a number, a list or a dict).

    Keras 3 keeps them on the model's `CompileLoss`, not on `model.loss_weights`.
    """
    return getattr(getattr(model, "_compile_loss", None), "_user_loss_weights", None)


def compile_loss(model):
    """The `CompileLoss` that `model.compile(loss=...)` built (a new object per such call), or None."""
    return getattr(model, "_compile_loss", None)


def unseeded_random_layers(model):
    """The names of `model`'s layers (nested ones included) whose random draws come from a
    `SeedGenerator` made without a seed (`Dropout(rate)` without `seed=`, `GaussianNoise`, ...)."""
    return [
        layer.name
        for layer in flat_layers(model)
        if getattr(getattr(layer, "seed_generator", None), "_initial_seed", 0) is None
    ]


def flat_layers(model):
    """Every layer inside `model`, nested ones included (not `model` itself); [] where Keras has no such
    walk."""
    return list(model._flatten_layers(include_self=False)) if hasattr(model, "_flatten_layers") else []


def model_tracker(model):
    """The attribute tracker of a Keras layer or model (None if it has none)."""
    return getattr(model, "_tracker", None)


def optimizer_iterations(optimizer):
    """The optimizer's step counter variable (counts applied updates, not accumulated steps)."""
    return optimizer._iterations


def accumulated_gradients(optimizer):
    """The gradient accumulators of an optimizer built with `gradient_accumulation_steps`, or None."""
    return getattr(optimizer, "_accumulated_gradients", None) if optimizer.built else None


def set_tracked_attribute(model, name, value):
    """Sets `model.<name> = value` through Keras' attribute tracking (a metric so set is tracked and
    saved with the model's variables); `value=None` untracks and deletes it. A built subclassed model
    locks its tracker: it is unlocked for the change and locked again."""
    tracker = model_tracker(model)
    locked = bool(tracker is not None and tracker.locked)
    if locked:
        tracker.unlock()
    try:
        if value is None:
            if tracker is not None:
                tracker.untrack(getattr(model, name))
            delattr(model, name)
        else:
            setattr(model, name, value)
    finally:
        if locked:
            tracker.lock()


def set_keras_seed(seed):
    """What `keras.utils.set_random_seed(seed)` does except seeding TensorFlow (which it imports even on
    the JAX and PyTorch backends): Keras' global seed and seed generator, Python's and numpy's RNGs."""
    import random

    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


def torch_device():
    """The device Keras' PyTorch backend puts new tensors on (its `keras.device` scope, else its default)."""
    from keras.src.backend.torch.core import get_device

    return get_device()


class forward_losses:  # noqa: N801 - a context manager named for what it does
    """Within the block, `model.losses` is `losses` (the losses a `stateless_call(..., return_losses=True)`
    returned), as Keras' JAX trainer sets them before `stateless_compute_loss`; restored after."""

    def __init__(self, model, losses):
        self.model, self.losses = model, list(losses or [])

    def __enter__(self):
        self.saved = getattr(self.model, "_losses_override", None)
        if self.losses and self.saved is not None:
            object.__setattr__(self.model, "_losses_override", self.losses)
        return self

    def __exit__(self, *exc):
        if self.losses and self.saved is not None:
            object.__setattr__(self.model, "_losses_override", self.saved)
        return False


def call_has_training_arg(model):
    """Whether `model.call` takes a `training` argument (Keras' own record of it; True if absent)."""
    return bool(getattr(model, "_call_has_training_arg", True))


def is_seed_state(variable):
    """True for the state variable of a `keras.random.SeedGenerator` (a layer's random draws: Dropout,
    GaussianNoise, a user's `keras.random.normal(..., seed=self.seed_generator)`): Keras names it
    "seed_generator_state" and tracks it among the layer's non-trainable variables."""
    return getattr(variable, "name", None) == "seed_generator_state"


class tensorflow_unasked:  # noqa: N801 - a context manager named for what it does
    """Within the block, Keras does not import TensorFlow to ask whether a value is one of its types.

    Keras' `serialize_keras_object` (under every layer's `get_config`, hence `clone_model`) asks
    `isinstance(obj, tf.TensorShape)` and imports TensorFlow for it on every backend (a slow import). Where
    TensorFlow is not imported yet no value can be one of its types, so the answer is the same without
    the import. A no-op where TensorFlow is imported or already asked about; restored on leaving.
    TensorFlow-only layers (`StringLookup`) made in the block would find it missing.
    """

    def __enter__(self):
        self.unasked = False
        try:  # a Keras without this module: a no-op
            from keras.src.utils import module_utils
        except ImportError:
            return self
        self.lazy = module_utils.tensorflow  # vars(): getattr on the lazy module would import TensorFlow
        self.unasked = vars(self.lazy).get("_available", False) is None and "tensorflow" not in sys.modules
        if self.unasked:
            self.lazy._available = False
        return self

    def __exit__(self, *exc):
        if self.unasked:
            self.lazy._available = None
        return False


_ELEMENTWISE_DRAWS = ("RandomNormal", "TruncatedNormal", "RandomUniform", "VarianceScaling")  # + subclasses


class random_initializers_skipped:  # noqa: N801 - a context manager named for what it does
    """Within the block (in this thread), a variable whose own initializer is one of Keras' integer-seeded
    elementwise random initializers (`GlorotUniform()`, `HeNormal(seed=1)`, `RandomNormal`, ...: Keras
    gives `seed=None` an integer) starts at zeros, with no draw. For `keras.saving.load_model`, whose file
    then assigns every variable: JAX compiles no random-number program (threefry), whose compilation
    slows each process's start-up.

    Exact: on leaving without an error, a variable so started that was not assigned since gets its real
    draw (an integer-seeded initializer draws the same values whenever it is called), so the values equal
    loading without the block. Untouched: draws that fill no variable or happen inside another
    initializer, `SeedGenerator`-seeded initializers (their generator advances), `Orthogonal` (on PyTorch
    its draw is a transposed tensor, and a variable keeps that memory layout through `assign`, which
    changes the float rounding of the layer's matmul) and other initializer classes. Keras' classes are
    restored on leaving, errors included.
    """

    def __enter__(self):
        self.thread, self.filling, self.skipped, self.patched = threading.get_ident(), [], {}, []
        try:  # a Keras without these: a no-op (every draw made)
            from keras.src.backend.common.variables import Variable as KerasVariable
            from keras.src.initializers.random_initializers import RandomInitializer
        except ImportError:
            return self
        for cls in RandomInitializer.__subclasses__():  # Glorot, He, Lecun inherit VarianceScaling's
            if cls.__name__ in _ELEMENTWISE_DRAWS and cls.__module__.startswith("keras."):
                self._patch(cls, "__call__", self._draw)
        self._patch(keras.Variable, "_initialize_with_initializer", self._fill)
        self._patch(KerasVariable, "assign", self._assign)
        return self

    def __exit__(self, kind, *rest):
        for cls, name, own in reversed(self.patched):
            setattr(cls, name, own) if own is not None else delattr(cls, name)
        for variable, initializer in self.skipped.values() if kind is None else ():
            variable.assign(initializer(variable.shape, dtype=variable.dtype))
        self.skipped.clear()
        return False

    def _patch(self, cls, name, make):
        self.patched.append((cls, name, vars(cls).get(name)))
        setattr(cls, name, functools.wraps(getattr(cls, name))(make(getattr(cls, name))))

    def _draw(self, original):
        def draw(initializer, shape, dtype=None, **kwargs):
            filling = self.filling[-1] if self.filling else (None, None)
            if initializer is not filling[1] or type(getattr(initializer, "seed", None)) is not int:
                return original(initializer, shape, dtype=dtype, **kwargs)
            self.skipped[id(filling[0])] = filling  # the variable's own initializer, not one inside it
            return keras.ops.zeros(shape, dtype=dtype)

        return draw

    def _fill(self, original):
        def fill(variable, initializer):
            if threading.get_ident() != self.thread:
                return original(variable, initializer)
            self.filling.append((variable, initializer))
            try:
                return original(variable, initializer)
            finally:
                self.filling.pop()

        return fill

    def _assign(self, original):
        def assign(variable, value):
            self.skipped.pop(id(variable), None)  # a skipped variable is held, so its id is its own
            return original(variable, value)

        return assign


def graph_nodes(model):
    """`(input_ids, nodes, output_ids)` of a built Sequential or Functional `model`, or None.

    `nodes` lists `(operation, input_ids, output_ids, output_shapes, input_shapes)` in an order where
    every node comes after the nodes that produce its inputs (Keras' `_nodes_by_depth`, deepest first);
    ids are `id()`s of the symbolic tensors; output shapes exclude the batch axis. A Sequential model
    is read through the Functional model Keras builds for it; None where there is no graph.
    """
    graph = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
    by_depth = getattr(graph, "_nodes_by_depth", None)
    if by_depth is None or not getattr(graph, "inputs", None):
        return None
    nodes = []
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            if node.operation is None or node.is_input:
                continue
            outputs = list(node.outputs)
            nodes.append(
                (
                    node.operation,
                    [id(t) for t in node.input_tensors],
                    [id(t) for t in outputs],
                    [tuple(t.shape[1:]) for t in outputs],
                    [tuple(t.shape) for t in node.input_tensors],
                )
            )
    return [id(t) for t in graph.inputs], nodes, [id(t) for t in graph.outputs]
