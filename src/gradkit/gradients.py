"""Loss gradients w.r.t. the inputs and the trainable weights, compiled once and reused.

References:
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (the input gradient grad_x L(y, f(x)) that FGSM follows).
"""

import inspect

import keras
import numpy as np
from keras import tree

from gradkit import backend, validation
from gradkit import losses as losses_lib
from gradkit.ensemble import WeightedEnsemble, as_ensemble


def _training_kwargs(model, training):
    params = inspect.signature(model.call).parameters
    return {"training": training} if "training" in params else {}


def _batches(n, batch_size):
    step = batch_size or n
    return [(start, min(start + step, n)) for start in range(0, n, step)]


def _take(structure, start, stop, pad_to, zeros=False):
    """Rows start:stop of every leaf, padded up to `pad_to` rows with copies of the first row (or 0)."""

    def take(a):
        rows = a[start:stop]
        if pad_to and rows.shape[0] < pad_to:
            filler = np.repeat(rows[:1] * 0 if zeros else rows[:1], pad_to - rows.shape[0], axis=0)
            rows = np.concatenate([rows, filler])
        return keras.ops.convert_to_tensor(rows)

    return tree.map_structure(take, structure)


class InputGradient:
    """Gradient of the loss w.r.t. the inputs of a model or weighted ensemble, compiled once.

    `fn(x, y)` returns d/dx sum_i w_i * L(y_i, f(x_i)): the gradient of each sample's own loss (so a
    sample's gradient does not depend on the other samples in its batch), with `w_i` the sample weights
    (default 1). For a `WeightedEnsemble` it is sum_k alpha_k * grad_x L(y, f_k(x)), all members in one
    compiled call. The function is built on the first call and reused: variable values are passed as
    arguments on every call, so later training of the model is seen without recompiling.

    Args:
        model: a built Keras model (Sequential, Functional or subclassed) or a `WeightedEnsemble`.
        loss: None (default: each model's compiled loss), a loss name, a `keras.losses.Loss` or a
            callable `fn(y_true, y_pred) -> per-sample loss`. Cross-entropy on a softmax (sigmoid)
            output is computed from the logits before it (see `gradkit.losses`) when the model is
            Sequential or Functional (nested ones included) and its output layer applies the
            activation. For a subclassed model the probabilities are used as Keras' loss uses them:
            on JAX and PyTorch, samples with a saturated softmax then get zero gradients
            (TensorFlow's Keras recovers the logits itself). For cross-entropy
            losses this is the plain cross-entropy of the hard labels, the loss attacks maximize
            (as in ART and foolbox): a compiled `label_smoothing` or `ignore_class` is not applied
            (weight gradients, which reproduce `fit`, do apply them).
        training: the mode the model runs in. Defaults to False (inference: Dropout off, BatchNorm
            uses its moving statistics). With True, Dropout and BatchNorm run in training mode, but
            no model variable (BatchNorm statistics, seed state) is ever changed: every call draws
            the same Dropout mask (the seed state is not advanced), and BatchNorm's batch statistics
            mix the rows of a batch (padding rows included), so rows are independent of their batch
            only with training=False.
        output: name or index of the output to differentiate, for models with several outputs.
        batch_size: rows per compiled call; the last batch is padded with zero-weight rows so it
            reuses the same compiled function. Defaults to None (the whole input in one call).
            Under an active `keras.distribution` (JAX backend only; see docs/scaling.md) each batch
            is padded to a multiple of the device count and sharded along the batch axis, so every
            device computes its rows in the same compiled call.

    Call args:
        x: float array `(n, *input_shape)`, or a list/dict of them for multi-input models.
        y: class ids `(n,)` int or one-hot `(n, n_classes)` for classification losses; targets of the
            output's shape for other losses.
        sample_weight: optional non-negative float `(n,)`. Defaults to ones.

    Returns:
        float32 numpy array(s) shaped like `x`, in the same structure.

    Raises:
        TypeError: integer inputs (no input gradient exists), symbolic tensors, a bad `model`.
        ValueError: mismatched lengths or feature shapes, NaN/inf in `x`, soft or out-of-range
            labels, a model compiled without a loss and no `loss=`.
        gradkit.errors.DisconnectedGradientError: the loss does not depend on `x` (argmax, round).
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    Example:
        >>> grad = InputGradient(model)                  # doctest: +SKIP
        >>> g = grad(x_test, y_test)                     # same shape as x_test  # doctest: +SKIP
        >>> grad.trace_count                             # 1  # doctest: +SKIP
    """

    def __init__(self, model, *, loss=None, training=False, output=None, batch_size=None):
        self.ensemble = as_ensemble(model)
        self.training = validation.check_flag(training, "training")
        self.batch_size = validation.check_batch_size(batch_size)
        first = self.ensemble.models[0]
        self.output_index = validation.output_index(first, output)
        self.n_classes = validation.n_outputs(first, self.output_index)
        self.specs, self._forward = [], []
        for member in self.ensemble.models:
            spec = losses_lib.resolve_loss(loss, member, output)
            self.specs.append(spec)
            self._forward.append(self._forward_model(member, spec))
        kinds = {s.kind for s in self.specs}
        if len(kinds) > 1:
            raise ValueError(f"All ensemble members must use the same kind of loss. Received: {kinds}")
        self.spec = self.specs[0]
        self._kwargs = _training_kwargs(first, self.training)
        self._fn = backend.compile_grad(self._loss, "x", per_output=self.ensemble.normalize_gradients)

    def _forward_model(self, member, spec):
        if spec.is_classification and not spec.from_logits:
            activation = "sigmoid" if spec.kind == "binary" else "softmax"
            layer = losses_lib.output_layer(member, self.output_index)
            if layer is not None and losses_lib._activation_name(layer) == activation:
                return losses_lib.logits_model(member, self.output_index)
        return member, spec.from_logits

    def _loss(self, trainables, non_trainables, x, y, sample_weight):
        terms = []
        for k, (model, is_logits) in enumerate(self._forward):
            out, _ = model.stateless_call(trainables[k], non_trainables[k], x, **self._kwargs)
            out = validation.select_output(out, self.output_index)
            per_sample = losses_lib.attack_per_sample(self.specs[k], y, out, is_logits)
            terms.append(keras.ops.sum(per_sample * sample_weight))
        if self.ensemble.normalize_gradients:
            return keras.ops.stack(terms)
        return sum(w * t for w, t in zip(self.ensemble.weights, terms))

    @property
    def trace_count(self):
        """How many times the loss was traced (TF, JAX) or distinct input signatures seen (torch)."""
        return self._fn.trace_count

    def check(self, x, y, sample_weight=None):
        """Validates a call's arguments; returns `(x, labels, sample_weight, n)` as numpy arrays."""
        first = self.ensemble.models[0]
        x, n = validation.check_x(first, x)
        if y is None:
            raise ValueError("`y` is required for input gradients. Received: y=None")
        n_classes = self.n_classes or validation.n_outputs(first, self.output_index, x)  # subclassed
        labels = losses_lib.check_labels(y, n, n_classes, self.spec)
        return x, labels, validation.check_sample_weight(sample_weight, n), n

    def __call__(self, x, y, sample_weight=None):
        x, labels, weights, n = self.check(x, y, sample_weight)
        return self.compute(x, labels, weights, n)

    def compute(self, x, labels, weights, n):
        """The gradient for already validated numpy inputs (see `check`); used by the attacks."""
        values = [
            (
                backend.variable_values(m.trainable_variables),
                backend.variable_values(m.non_trainable_variables),
            )
            for m in self.ensemble.models
        ]
        trainables = [v[0] for v in values]
        non_trainables = [v[1] for v in values]
        parts = []
        multiple = backend.batch_multiple()
        for start, stop in _batches(n, self.batch_size):
            pad = -(-(self.batch_size or stop - start) // multiple) * multiple
            xb, yb, wb = backend.distribute_batch(
                (
                    _take(x, start, stop, pad),
                    _take(labels, start, stop, pad),
                    _take(weights, start, stop, pad, True),
                )
            )
            _, grads = self._fn(trainables, non_trainables, xb, yb, wb)
            parts.append(tree.map_structure(keras.ops.convert_to_numpy, grads))
            parts[-1] = tree.map_structure(lambda g, r=stop - start: _rows(g, r, self._stacked), parts[-1])
        grads = tree.map_structure(lambda *p: np.concatenate(p, axis=int(self._stacked)), *parts)
        if self._stacked:
            grads = _normalize_and_weight(grads, self.ensemble.weights)
        return tree.map_structure(lambda g: g.astype(np.float32, copy=False), grads)

    @property
    def _stacked(self):
        return self.ensemble.normalize_gradients


def _rows(g, rows, stacked):
    return g[:, :rows] if stacked else g[:rows]


def _normalize_and_weight(grads, weights):
    """(K, n, ...) member gradients -> sum_k alpha_k g_k / ||g_k||_2 (norm per sample, all inputs)."""
    leaves = tree.flatten(grads)
    k, n = leaves[0].shape[:2]
    sq = sum(np.square(g.reshape(k, n, -1)).sum(axis=-1) for g in leaves)
    scale = np.asarray(weights).reshape(k, 1) / np.maximum(np.sqrt(sq), 1e-12)

    def combine(g):
        return np.einsum("kn,kn...->n...", scale, g)

    return tree.map_structure(combine, grads)


def cached(owner, kind, factory, **options):
    """`factory()`, built once per `(kind, options)` and kept on `owner` (a Keras model or a
    `WeightedEnsemble`) in its `__dict__`: the cache lives and dies with its owner, never tracked."""
    if not isinstance(owner, (keras.Model, WeightedEnsemble)):
        return factory()
    key = (kind, tuple(sorted((k, repr(v)) for k, v in options.items())))
    cache = vars(owner).setdefault("_gradkit_cache", {})
    if key not in cache:
        cache[key] = factory()
    return cache[key]


def input_gradient(
    model, x, y, *, sample_weight=None, loss=None, training=False, output=None, batch_size=None
):
    """One-shot form of `InputGradient`: d loss / d x for `model` at `(x, y)`.

    The compiled function is cached on the model (for each combination of options), so repeated
    calls do not rebuild it; the cache goes away with the model. Arguments, return value and errors
    are those of `InputGradient`.
    """

    def factory():
        return InputGradient(model, loss=loss, training=training, output=output, batch_size=batch_size)

    fn = cached(model, "input", factory, loss=loss, training=training, output=output, batch_size=batch_size)
    return fn(x, y, sample_weight)


class WeightGradient:
    """Gradient of the training loss w.r.t. `model.trainable_weights`, compiled once.

    The loss is the one `fit` minimizes on a batch: the Keras loss of each output, reduced the Keras
    way (sum_i w_i * L_i / batch_size, where w_i are the sample weights), plus the model's
    regularization losses (`model.losses`) when `include_regularization` is True. Variable values are
    passed on every call, so later training is seen without recompiling. No loss scaling is applied,
    so nothing needs undoing.

    Args:
        model: a built Keras model.
        loss: None (the compiled loss) or a loss as in `InputGradient`.
        training: mode of the forward pass. Defaults to True, as in `fit` (Dropout draws a mask from
            the model's seed state, BatchNorm normalizes with the batch statistics); no variable of
            the model is changed.
        include_regularization: add `model.losses` (weight and activity regularizers). Defaults to True.
        output: name or index of a single output to use, for multi-output models. Defaults to None:
            a single-output model's only output, or every output with a compiled loss.
    """

    def __init__(self, model, *, loss=None, training=True, include_regularization=True, output=None):
        if not isinstance(model, keras.Model):
            raise TypeError(f"`model` must be a keras.Model. Received: {type(model).__name__}")
        self.model = model
        self.include_regularization = validation.check_flag(include_regularization, "include_regularization")
        self.heads = _heads(model, loss, output)
        self._kwargs = _training_kwargs(model, validation.check_flag(training, "training"))
        self._fn = backend.compile_grad(self._loss, "trainable")

    def _loss(self, trainable, non_trainable, x, y, sample_weight):
        out, _, reg = self.model.stateless_call(
            trainable, non_trainable, x, return_losses=True, **self._kwargs
        )
        n = keras.ops.cast(keras.ops.shape(sample_weight)[0], "float32")
        total = 0.0
        for (index, spec, weight), target in zip(self.heads, y):
            per_sample = losses_lib.keras_per_sample(spec, target, validation.select_output(out, index))
            total = total + weight * keras.ops.sum(per_sample * sample_weight) / n
        if self.include_regularization and reg:
            total = total + sum(keras.ops.cast(r, "float32") for r in reg)
        return total

    @property
    def trace_count(self):
        return self._fn.trace_count

    def __call__(self, x, y, sample_weight=None):
        x, n = validation.check_x(self.model, x, require_float=False)
        if isinstance(y, dict):
            names = list(self.model.output_names)
            missing = [names[i] for i, _, _ in self.heads if names[i] not in y]
            if missing:
                raise ValueError(f"`y` lacks targets for the outputs {missing}.")
            targets = [y[names[i]] for i, _, _ in self.heads]
        else:
            targets = y if len(self.heads) > 1 else [y]
        if len(targets) != len(self.heads):
            raise ValueError(f"`y` must hold one target per output with a loss ({len(self.heads)}).")
        ys = []
        for (index, spec, _), target in zip(self.heads, targets):
            n_classes = validation.n_outputs(self.model, index, x)
            labels = losses_lib.check_labels(target, n, n_classes, spec)
            ys.append(
                keras.ops.convert_to_tensor(
                    losses_lib.labels_for_loss(labels, spec, n_classes) if spec.is_classification else labels
                )
            )
        weights = keras.ops.convert_to_tensor(validation.check_sample_weight(sample_weight, n))
        if not self.model.trainable_variables:
            raise ValueError("The model has no trainable weights, so there is no weight gradient.")
        backend.batch_multiple()  # TF/torch: refuse an active keras.distribution rather than ignore it
        trainable = backend.variable_values(self.model.trainable_variables, differentiable=True)
        non_trainable = backend.variable_values(self.model.non_trainable_variables)
        x = tree.map_structure(keras.ops.convert_to_tensor, x)
        _, grads = self._fn(trainable, non_trainable, x, ys, weights)
        return [keras.ops.convert_to_numpy(g) for g in grads]


def _heads(model, loss, output):
    """[(output index, LossSpec, loss weight)] for the outputs the training loss covers."""
    names = list(getattr(model, "output_names", None) or [])
    if output is not None or len(getattr(model, "outputs", None) or [None]) == 1:
        index = validation.output_index(model, output)
        return [(index, losses_lib.resolve_loss(loss, model, output), 1.0)]
    compiled = loss if loss is not None else getattr(model, "loss", None)
    # compile(loss_weights=...) applies to the compiled loss only; Keras 3 keeps it on its CompileLoss.
    weights = (
        None
        if loss is not None
        else getattr(getattr(model, "_compile_loss", None), "_user_loss_weights", None)
    )

    def weight(index):
        if isinstance(weights, dict):
            return float(weights.get(names[index], 1.0))
        if isinstance(weights, (list, tuple)):
            return float(weights[index])
        return 1.0 if weights is None else float(weights)  # one number for one loss over all heads

    if isinstance(compiled, dict):
        chosen = [(names.index(k), k) for k in names if compiled.get(k) is not None]
    elif isinstance(compiled, (list, tuple)):
        chosen = [(i, i) for i, v in enumerate(compiled) if v is not None]
    else:
        return [(i, losses_lib.resolve_loss(compiled, model, i), weight(i)) for i in range(len(names))]
    return [
        (index, losses_lib.resolve_loss(compiled[key], model, key), weight(index)) for index, key in chosen
    ]


def weight_gradients(
    model, x, y, *, sample_weight=None, loss=None, training=True, include_regularization=True, output=None
):
    """Gradient of the training loss on one batch w.r.t. each of `model.trainable_weights`.

    The gradient `fit` would apply on this batch (before any clipping), see `WeightGradient`. The
    compiled function is cached on the model.

    Args:
        model: a built Keras model.
        x: input batch `(n, ...)` (any dtype the model takes, integers included), or a list/dict.
        y: targets: class ids `(n,)` or one-hot for cross-entropy losses, else the output's shape;
            for several outputs, a list or dict with one entry per output with a loss.
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
