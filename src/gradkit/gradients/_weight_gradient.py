"""Gradient of the training loss w.r.t. a model's trainable weights: the gradient `fit` applies."""

import keras
from keras import tree

from gradkit import _checks, _keras_internals, backend
from gradkit.gradients._cache import cached, compiled, split_of, variable_split
from gradkit.gradients._labels import check_labels, check_sample_weight, labels_for_loss
from gradkit.gradients._losses import keras_reduced, loss_scale, resolve_loss, unscaled
from gradkit.gradients._model_io import check_model, check_x, training_kwargs
from gradkit.gradients._outputs import n_outputs, output_index, output_key, output_names, select_output


class WeightGradient:
    """Gradient of the training loss w.r.t. `model.trainable_weights`, compiled once.

    The loss is the one `fit` minimizes on a batch: the Keras loss of each output, reduced the Keras
    way (sum_i w_i * L_i / batch_size, where w_i are the sample weights), plus the model's
    regularization losses (`model.losses`) when `include_regularization` is True; a loss compiled
    with `reduction="mean_with_sample_weight"` divides by sum_i w_i instead. Variable values are
    passed on every call, so later training is seen without recompiling. Under a float16 policy
    (`"mixed_float16"`) the loss is multiplied by the loss scale `fit` uses (the compiled
    `LossScaleOptimizer`'s current scale, else 2**15) and the gradient divided by it, so gradients
    too small for float16 do not vanish; the result is unscaled, as the optimizer applies it.

    Args:
        model: a built Keras model.
        loss: None (the compiled loss) or a loss as in `InputGradient`.
        training: mode of the forward pass. Defaults to True, as in `fit` (Dropout draws a mask from
            the model's seed state, BatchNorm normalizes with the batch statistics); no variable of
            the model is changed.
        include_regularization: add `model.losses` (weight and activity regularizers). Defaults to True.
        output: a single output to use, for multi-output models: a dict output's key or an output
            layer's name (or an index into `model.outputs`). Defaults to None: a single-output model's
            only output, or every output with a compiled loss (a dict of losses and of `loss_weights`
            is read by the outputs' names, as `fit` reads it).
    """

    def __init__(self, model, *, loss=None, training=True, include_regularization=True, output=None):
        check_model(model)
        self.model = model
        self.include_regularization = _checks.check_flag(include_regularization, "include_regularization")
        self.heads = _heads(model, loss, output)
        self._kwargs = training_kwargs(model, _checks.check_flag(training, "training"))
        self._options = dict(
            loss=loss, training=training, include_regularization=include_regularization, output=output
        )
        self._split = variable_split([model])
        self._fn = compiled([model], "weights", self._compile, **self._options)

    def _compile(self):
        return backend.compile_grad(self._loss, "trainable")

    def _loss(self, trainable, non_trainable, x, y, weights):
        out, _, reg = backend.stateless_call(
            self.model, trainable, non_trainable, x, return_losses=True, **self._kwargs
        )
        total = 0.0
        for (index, spec, weight), target in zip(self.heads, y):
            head = select_output(out, output_key(self.model, index))
            total = total + weight * keras_reduced(spec, target, head, weights["rows"])
        if self.include_regularization and reg:
            total = total + sum(keras.ops.cast(r, "float32") for r in reg)
        return total * weights["scale"]

    @property
    def trace_count(self):
        """Traces of the loss (TF, JAX) or input signatures seen (torch), for the current trainable split."""
        return self._fn.trace_count

    def __call__(self, x, y, sample_weight=None):
        x, n = check_x(self.model, x, require_float=False)
        ys = self._targets(x, y, n)
        rows = keras.ops.convert_to_tensor(check_sample_weight(sample_weight, n))
        variables = self.model.trainable_variables
        if not variables:
            raise ValueError("The model has no trainable weights, so there is no weight gradient.")
        backend.batch_multiple()  # TF/torch: refuse an active keras.distribution rather than ignore it
        if split_of([variables]) != self._split:  # layers frozen or unfrozen since: see `compiled`
            self._split = split_of([variables])
            self._fn = compiled([self.model], "weights", self._compile, **self._options)
        fn = self._fn
        trainable = backend.variable_values(variables, differentiable=True)
        non_trainable = backend.variable_values(self.model.non_trainable_variables)
        x = tree.map_structure(keras.ops.convert_to_tensor, x)

        def grads(scale):
            weights = {"rows": rows, "scale": keras.ops.convert_to_tensor(scale, "float32")}
            _, g = fn(trainable, non_trainable, x, ys, weights)
            return [keras.ops.convert_to_numpy(v) for v in g]

        return unscaled(grads, loss_scale([self.model]))

    def _targets(self, x, y, n):
        """One tensor per head: the targets in the form its Keras loss takes (as `fit` takes them)."""
        if isinstance(y, dict):
            names = output_names(self.model)
            missing = [names[i] for i, _, _ in self.heads if names[i] not in y]
            if missing:
                raise ValueError(
                    f"`y` lacks targets for the outputs {missing}. Received: y with keys {list(y)}"
                )
            targets = [y[names[i]] for i, _, _ in self.heads]
        else:
            targets = y if len(self.heads) > 1 else [y]
        if len(targets) != len(self.heads):
            raise ValueError(f"`y` must hold one target per output with a loss ({len(self.heads)}).")
        ys = []
        for (index, spec, _), target in zip(self.heads, targets):
            n_classes = n_outputs(self.model, index, x)
            labels = check_labels(target, n, n_classes, spec, fit_targets=True)
            if spec.is_classification and labels.ndim == 1:
                labels = labels_for_loss(labels, spec, n_classes)
            ys.append(keras.ops.convert_to_tensor(labels))
        return ys


def _heads(model, loss, output):
    """[(output index, LossSpec, loss weight)] for the outputs the training loss covers, each found by
    name: a dict of losses or loss weights is read by the outputs' names (dict keys, else layer names)."""
    names = output_names(model)
    layer_names = list(getattr(model, "output_names", None) or [])
    if output is not None or len(getattr(model, "outputs", None) or [None]) == 1:
        index = output_index(model, output)
        return [(index, resolve_loss(loss, model, output), 1.0)]
    compiled = loss if loss is not None else getattr(model, "loss", None)
    # compile(loss_weights=...) applies to the compiled loss only; Keras 3 keeps it on its CompileLoss.
    weights = None if loss is not None else _keras_internals.compiled_loss_weights(model)

    def weight(index):
        if isinstance(weights, dict):
            key = names[index] if names[index] in weights else layer_names[index]
            return float(weights.get(key, 1.0))
        if isinstance(weights, (list, tuple)):
            return float(weights[index])
        return 1.0 if weights is None else float(weights)  # one number for one loss over all heads

    if isinstance(compiled, dict):
        keys = [(i, n if n in compiled else layer_names[i]) for i, n in enumerate(names)]
        chosen = [(i, k) for i, k in keys if compiled.get(k) is not None]
    elif isinstance(compiled, (list, tuple)):
        chosen = [(i, i) for i, v in enumerate(compiled) if v is not None]
    else:
        return [(i, resolve_loss(compiled, model, i), weight(i)) for i in range(len(names))]
    return [(index, resolve_loss(compiled[key], model, index), weight(index)) for index, key in chosen]


def weight_gradients(
    model, x, y, *, sample_weight=None, loss=None, training=True, include_regularization=True, output=None
):
    """Gradient of the training loss on one batch w.r.t. each of `model.trainable_weights`.

    The gradient `fit` would apply on this batch (before any clipping; loss-scaled and unscaled under
    a float16 policy as `fit` does), see `WeightGradient`. The compiled function is cached on the model.

    Args:
        model: a built Keras model.
        x: input batch `(n, ...)` (any dtype the model takes, integers included), or a list/dict.
        y: targets as `fit` takes them: class ids `(n,)` or one-hot (or soft) rows for categorical
            cross-entropy, class ids or one-hot rows for sparse categorical cross-entropy, 0/1 or soft
            targets of the output's shape `(n, k)` for binary cross-entropy (multi-label included),
            else the output's shape; for several outputs, a list or dict with one entry per output
            with a loss.
        sample_weight: non-negative float `(n,)`. Defaults to ones.
        loss, training, include_regularization, output: see `WeightGradient`.

    Returns:
        list of numpy arrays, one per entry of `model.trainable_weights`, in that order and shape;
        zeros for weights the loss does not reach.

    Raises:
        ValueError: an uncompiled model without `loss=`, bad shapes or labels, no trainable weights.
        gradkit.errors.DisconnectedGradientError: the loss depends on none of the weights (argmax).
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).
    """

    def factory():
        return WeightGradient(
            model, loss=loss, training=training, include_regularization=include_regularization, output=output
        )

    fn = cached(
        model,
        "weights",
        factory,
        loss=loss,
        training=training,
        include_regularization=include_regularization,
        output=output,
    )
    return fn(x, y, sample_weight)
