"""A classifier read as a chain of bound rules: the table of the Keras layers `certify` takes.

`plan(model)` turns the model's logits graph (its final softmax removed, `gradients.logits_model`) into
`Step`s in execution order, one rule kind each:

    affine      Dense, Conv1D/2D (their activation split into its own step), BatchNormalization
                (inference), Rescaling, Normalization, Average/GlobalAveragePooling1D/2D, ZeroPadding,
                channels-first Flatten: `apply(x)` is the layer, `apply_abs(r)` the same linear map with
                |coefficients| and no offset (the radius of an interval).
    identity    Flatten (channels-last), Reshape, Dropout and the other inference-time identities: the
                values keep their row-major order, so bounds pass through reshaped.
    add         Add (residual blocks): the sum of its inputs.
    activation  ReLU, LeakyReLU and the monotone non-decreasing activations (sigmoid, tanh, elu, selu,
                softplus, softsign, relu6, hard_sigmoid, linear), as layers or as a layer's `activation`.
    maxpool     MaxPooling1D/2D: a monotone function of each window.

Any other layer raises `ValueError` naming it before any work.
"""

import dataclasses

import keras
import numpy as np
from keras import layers, ops

from gradkit import _keras_internals

_IDENTITY = (
    layers.Reshape,
    layers.Dropout,
    layers.SpatialDropout1D,
    layers.SpatialDropout2D,
    layers.GaussianNoise,
    layers.GaussianDropout,
    layers.AlphaDropout,
    layers.ActivityRegularization,
)
_WEIGHTED = (layers.Dense, layers.Conv1D, layers.Conv2D)
_ELEMENTWISE = (layers.BatchNormalization, layers.Rescaling, layers.Normalization)
_POSITIVE = (
    layers.AveragePooling1D,
    layers.AveragePooling2D,
    layers.GlobalAveragePooling1D,
    layers.GlobalAveragePooling2D,
    layers.ZeroPadding1D,
    layers.ZeroPadding2D,
    layers.Flatten,
)
_MONOTONE = {
    "relu": "relu",
    "linear": "linear",
    "leaky_relu": "leaky",
    "sigmoid": "monotone",
    "hard_sigmoid": "monotone",
    "tanh": "monotone",
    "hard_tanh": "monotone",
    "elu": "monotone",
    "selu": "monotone",
    "softplus": "monotone",
    "softsign": "monotone",
    "relu6": "monotone",
}
SUPPORTED = (
    "Dense, Conv1D, Conv2D, BatchNormalization, ReLU, LeakyReLU, ELU, Activation (monotone: relu, "
    "leaky_relu, sigmoid, tanh, elu, selu, softplus, softsign, relu6, hard_sigmoid, linear), "
    "MaxPooling1D/2D, AveragePooling1D/2D, GlobalAveragePooling1D/2D, ZeroPadding1D/2D, Flatten, "
    "Reshape, Add, Rescaling, Normalization, Dropout (inference), a final softmax"
)


@dataclasses.dataclass
class Step:
    """One bound rule: `kind`, the `layer`, the value ids it reads and writes, the output's shape."""

    kind: str
    layer: object
    inputs: list
    output: object
    shape: tuple
    apply: object = None  # affine: x -> L(x); activation, maxpool: the monotone function
    apply_abs: object = None  # affine: r -> |L|(r)
    relax: str = ""  # activation: "relu", "leaky", "linear" or "monotone"
    pool: object = None  # maxpool: its `Windows`, read once from the layer
    slope: float = 0.0  # leaky: the negative slope


@dataclasses.dataclass
class Plan:
    """The steps of a model in execution order, its input and logits ids, every value's shape."""

    steps: list
    input: object
    output: object
    shapes: dict
    logits: object  # the model the steps read (its final softmax removed), run on the model's values


def _unsupported(layer, why=""):
    if type(layer).__name__ == "TorchModuleWrapper":
        why = (
            ": a wrapped torch module is opaque to gradkit's bound rules (build the network in Keras layers)"
        )
    raise ValueError(
        f"`certify` has no bound rule for layer {layer.name!r} ({type(layer).__name__}){why}. Supported: "
        f"{SUPPORTED}."
    )


def _activation_kind(fn, layer):
    name = getattr(fn, "__name__", "")
    if name not in _MONOTONE:
        _unsupported(layer, f": activation {name!r} is not a monotone activation gradkit can bound")
    return name, _MONOTONE[name]


def _linear_twin(layer, input_shape):
    """A copy of a weighted layer with a linear activation, run on the original's current values."""
    config = {**layer.get_config(), "activation": "linear", "name": f"{layer.name}_certify"}
    twin = type(layer).from_config(config)
    twin.build(input_shape)

    def run(x, absolute=False):
        values = [ops.convert_to_tensor(w.value) for w in layer.weights]
        if absolute:
            values = [ops.abs(values[0])] + [ops.zeros_like(v) for v in values[1:]]
        with keras.StatelessScope(state_mapping=list(zip(twin.weights, values))):
            return twin(x)

    return run


def _weighted_steps(layer, inputs, output, shape, input_shape):
    run = _linear_twin(layer, input_shape)
    name, relax = _activation_kind(layer.activation, layer)
    slope = 0.2 if name == "leaky_relu" else 0.0  # keras.activations.leaky_relu's default
    affine = Step("affine", layer, inputs, output, shape, run, lambda r: run(r, absolute=True))
    if name == "linear":
        return [affine]
    affine.output = ("pre", output)
    act = Step(
        "activation", layer, [affine.output], output, shape, layer.activation, relax=relax, slope=slope
    )
    return [affine, act]


def _elementwise(layer):
    def run(x):
        return layer(x, training=False)

    def run_abs(r):
        one = ops.ones((1,) + tuple(r.shape[1:]), r.dtype)
        coefficient = run(one) - run(ops.zeros_like(one))
        return ops.abs(coefficient) * r

    return run, run_abs


def _activation_step(layer, inputs, output, shape):
    step = Step("activation", layer, inputs, output, shape, layer, relax="monotone")
    if isinstance(layer, layers.ReLU):
        if not layer.max_value and not layer.threshold:
            slope = float(layer.negative_slope or 0.0)
            step.relax, step.slope = ("leaky", slope) if slope else ("relu", 0.0)
        return step
    if isinstance(layer, layers.LeakyReLU):
        step.relax, step.slope = "leaky", float(layer.negative_slope)
        return step if 0 <= step.slope <= 1 else _unsupported(layer, ": negative_slope outside [0, 1]")
    if isinstance(layer, layers.ELU):
        return step
    name, step.relax = _activation_kind(layer.activation, layer)
    step.apply, step.slope = layer.activation, 0.2 if name == "leaky_relu" else 0.0  # Keras' default
    return step


@dataclasses.dataclass(frozen=True)
class Windows:
    """The static index arrays of a max-pooling layer, numpy: `members` int32 `(d_out, k)` (the inputs
    of each window, a window of fewer than k repeating its first), `owner` int32 `(d_in,)` (the window
    of each input; 0 where none), `covered` bool `(d_in,)` (in some window), `overlapping` (an input in
    two windows)."""

    members: np.ndarray
    owner: np.ndarray
    covered: np.ndarray
    overlapping: bool


def _windows(layer, shape):
    """The `Windows` of a pooling layer, read from the layer on the basis vectors of its input."""
    d = int(np.prod(shape))
    out = keras.ops.convert_to_numpy(layer(np.eye(d, dtype="float32").reshape((d,) + tuple(shape))))
    inside = out.reshape(d, -1) > 0.5  # (d_in, d_out)
    k = int(inside.sum(axis=0).max())
    members = []
    for j in range(inside.shape[1]):
        rows = np.flatnonzero(inside[:, j])
        members.append(np.concatenate([rows, np.full(k - len(rows), rows[0])]))
    covered = inside.any(axis=1)
    owner = np.where(covered, inside.argmax(axis=1), 0).astype("int32")
    return Windows(np.array(members, dtype="int32"), owner, covered, bool(inside.sum(axis=1).max() > 1))


def _steps_of(layer, inputs, output, shape, input_shapes):
    if isinstance(layer, _WEIGHTED):
        return _weighted_steps(layer, inputs, output, shape, input_shapes[0])
    if isinstance(layer, _ELEMENTWISE):
        return [Step("affine", layer, inputs, output, shape, *_elementwise(layer))]
    flat_last = isinstance(layer, layers.Flatten) and layer.data_format != "channels_first"
    if isinstance(layer, _IDENTITY) or flat_last:
        return [Step("identity", layer, inputs, output, shape)]
    if isinstance(layer, _POSITIVE):
        run = lambda x: layer(x)  # noqa: E731 - the same linear map on values and radii
        return [Step("affine", layer, inputs, output, shape, run, run)]
    if isinstance(layer, layers.Add):
        return [Step("add", layer, inputs, output, shape)]
    if isinstance(layer, (layers.MaxPooling1D, layers.MaxPooling2D)):
        step = Step("maxpool", layer, inputs, output, shape, layer)
        step.pool = _windows(layer, input_shapes[0][1:])
        return [step]
    if isinstance(layer, (layers.ReLU, layers.LeakyReLU, layers.ELU, layers.Activation)):
        return [_activation_step(layer, inputs, output, shape)]
    return _unsupported(layer)


def plan(model):
    """The `Plan` of a one-input, one-output classifier's logits; ValueError naming what is not supported."""
    from gradkit.gradients import logits_model

    logits, _ = logits_model(model)
    graph = _keras_internals.graph_nodes(logits)
    if graph is None:
        raise ValueError(
            f"`certify` needs a built Sequential or Functional model. Received: model={model.name!r} "
            f"({type(model).__name__}, no graph of layers gradkit can read)"
        )
    inputs, nodes, outputs = graph
    if len(inputs) != 1 or len(outputs) != 1:
        raise ValueError(
            f"`certify` takes a model with one input and one output. Received: model={model.name!r} with "
            f"{len(inputs)} inputs and {len(outputs)} outputs"
        )
    steps, shapes = [], {}
    for layer, ins, outs, out_shapes, in_shapes in nodes:
        if isinstance(layer, layers.InputLayer):
            continue
        if isinstance(layer, keras.Model):
            raise ValueError(
                f"`certify` reads one level of layers: model {layer.name!r} is nested in "
                f"{model.name!r}; build the model from its layers."
            )
        if len(outs) != 1:
            _unsupported(layer, ": it returns several tensors")
        for step in _steps_of(layer, ins, outs[0], out_shapes[0], in_shapes):
            steps.append(step)
            shapes[step.output] = out_shapes[0]
    shapes[inputs[0]] = tuple(logits.inputs[0].shape[1:])
    return Plan(steps, inputs[0], outputs[0], shapes, logits)
