"""Gradient of the loss w.r.t. the inputs of a model or weighted ensemble, compiled once and reused.

References:
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (the input gradient grad_x L(y, f(x)) that FGSM follows).
"""

import warnings

import keras
import numpy as np
from keras import tree

from gradkit import _checks, _keras_internals, backend
from gradkit.gradients._batches import batches, call_size, rows, take
from gradkit.gradients._cache import cached, compiled, split_of, variable_split
from gradkit.gradients._ensemble import as_ensemble, normalize_and_weight
from gradkit.gradients._labels import check_labels, check_sample_weight
from gradkit.gradients._logits import classifier_forward
from gradkit.gradients._losses import attack_per_sample, loss_scale, resolve_loss, unscaled
from gradkit.gradients._model_io import check_x, training_kwargs
from gradkit.gradients._outputs import n_outputs, output_index, output_key, select_output


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
            output is computed from the logits before it when the model is Sequential or
            Functional (nested ones included) and its graph applies the activation last, however
            written (a layer's `activation`, `Activation`, `keras.layers.Softmax`, `keras.ops.softmax`;
            see `gradkit.gradients._logits`). Otherwise (a `Lambda` of other code, a subclassed
            model) the probabilities are used as Keras' loss uses them, with a warning (once per
            model) and `from_probabilities` set: on JAX and PyTorch, samples with a saturated
            softmax then get zero gradients. Binary cross-entropy on a k-unit output (multi-label)
            is refused: input gradients need one true class per sample. A cross-entropy's
            `label_smoothing` and `ignore_class` are applied as Keras applies them (an ignored
            row's gradient is 0); the attacks, which maximize the plain cross-entropy, refuse them.
        training: the mode the model runs in. Defaults to False (inference: Dropout off, BatchNorm
            uses its moving statistics). With True, Dropout and BatchNorm run in training mode, but
            no model variable (BatchNorm statistics, seed state) is ever changed: every call draws
            the same Dropout mask (the seed state is not advanced), and BatchNorm's batch statistics
            mix the rows of a batch (of `batch_size` rows, the last one smaller; never padded in
            training mode), so rows are independent of their batch only with training=False.
            Except on PyTorch for a random layer made without `seed=` (`Dropout(0.5)`): Keras then
            draws from torch's global generator, a new mask per call (and the global stream
            advances); a UserWarning names such layers. Give them `seed=`.
        output: the output to differentiate, for models with several outputs: a dict output's key or
            an output layer's name (an index counts in `model.outputs` order, which Keras sorts).
        batch_size: rows per compiled call; with training=False the last batch is padded with
            zero-weight rows so it reuses the same compiled function (with training=True nothing is
            padded: padding rows would enter the batch statistics). Defaults to None (the whole input
            in one call).
            Under an active `keras.distribution` (JAX backend only; see docs/scaling.md) each batch
            is padded to a multiple of the device count and sharded along the batch axis, so every
            device computes its rows in the same compiled call (with training=True each batch must
            hold a multiple of the device count, else ValueError).

    Call args:
        x: float array `(n, *input_shape)`, or a list/dict of them for multi-input models.
        y: class ids `(n,)` int or one-hot `(n, n_classes)` for classification losses; targets of the
            output's shape for other losses.
        sample_weight: optional non-negative float `(n,)`. Defaults to ones.

    Returns:
        float32 numpy array(s) shaped like `x`, in the same structure. Under a float16 policy the
        loss is scaled as `fit` scales it (see `WeightGradient`) and the gradient unscaled.

    Attributes:
        from_probabilities: list of bool, one per member: True where the logits could not be
            recovered and the gradient goes through the probabilities.
        loss_scale: float, the loss scale used (1.0 unless a member computes in float16).

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
        self.training = _checks.check_flag(training, "training")
        self.batch_size = _checks.check_batch_size(batch_size)
        first = self.ensemble.models[0]
        self.output_index = output_index(first, output)
        self.n_classes = n_outputs(first, self.output_index)
        self.specs, self._forward, self._keys = [], [], []
        for member in self.ensemble.models:
            spec = resolve_loss(loss, member, output)
            self.specs.append(spec)
            index = output_index(member, output)  # each member's own head of that name
            forward, is_logits = self._forward_model(member, spec, index)
            self._forward.append((forward, is_logits))
            self._keys.append(output_key(forward, index))
        kinds = {s.kind for s in self.specs}
        if len(kinds) > 1:
            raise ValueError(f"All ensemble members must use the same kind of loss. Received: {kinds}")
        self.spec = self.specs[0]
        self.from_probabilities = [not is_logits for _, is_logits in self._forward]
        self.loss_scale = loss_scale(self.ensemble.models)
        self._kwargs = training_kwargs(first, self.training)
        if self.training and backend.UNSEEDED_LAYERS_DRAW_GLOBALLY:
            _warn_unseeded(self.ensemble.models)
        self._options = dict(
            loss=loss,
            training=self.training,
            output=self.output_index,
            stacked=self._stacked,
            batch_size=self.batch_size,  # its own shapes: trace_count counts this configuration's traces
            devices=backend.batch_multiple(),  # a data-parallel layout is another configuration
        )
        self._split = variable_split(self.ensemble.models)
        self._fn = compiled(self.ensemble.models, "input", self._compile, **self._options)

    def _compile(self):
        return backend.compile_grad(self._loss, "x", per_output=self._stacked)

    def _forward_model(self, member, spec, index):
        if not spec.is_classification or spec.from_logits:
            return member, spec.from_logits
        if spec.kind == "binary" and self.n_classes > 1:  # multi-label: refused by `check`
            return member, False
        activation = "sigmoid" if spec.kind == "binary" else "softmax"
        return classifier_forward(member, index, activation)

    def _loss(self, trainables, non_trainables, x, y, sample_weight):
        terms = []
        for k, (model, is_logits) in enumerate(self._forward):
            out, _ = backend.stateless_call(model, trainables[k], non_trainables[k], x, **self._kwargs)
            out = select_output(out, self._keys[k])
            per_sample = attack_per_sample(self.specs[k], y, out, is_logits)
            terms.append(keras.ops.sum(per_sample * sample_weight["rows"]) * sample_weight["scale"])
        if self._stacked:
            return keras.ops.stack(terms)
        return sum(sample_weight["alpha"][k] * t for k, t in enumerate(terms))

    @property
    def trace_count(self):
        """How many times the loss was traced (TF, JAX) or distinct input signatures seen (torch)."""
        return self._fn.trace_count

    def check(self, x, y, sample_weight=None):
        """Validates a call's arguments; returns `(x, labels, sample_weight, n)` as numpy arrays."""
        first = self.ensemble.models[0]
        x, n = check_x(first, x)
        if y is None:
            raise ValueError("`y` is required for input gradients. Received: y=None")
        n_classes = self.n_classes or n_outputs(first, self.output_index, x)  # subclassed
        labels = check_labels(y, n, n_classes, self.spec)
        return x, labels, check_sample_weight(sample_weight, n), n

    def __call__(self, x, y, sample_weight=None):
        x, labels, weights, n = self.check(x, y, sample_weight)
        return self.compute(x, labels, weights, n)

    def compute(self, x, labels, weights, n):
        """The gradient for already validated numpy inputs (see `check`); used by the attacks."""
        models = self.ensemble.models
        lists = [(m.trainable_variables, m.non_trainable_variables) for m in models]
        if split_of(t for t, _ in lists) != self._split:  # layers frozen or unfrozen since
            self._split = split_of(t for t, _ in lists)
            self._fn = compiled(models, "input", self._compile, **self._options)
        trainables = [backend.variable_values(t) for t, _ in lists]
        non_trainables = [backend.variable_values(n) for _, n in lists]
        parts, alpha = [], keras.ops.convert_to_tensor(np.asarray(self.ensemble.weights, "float32"))
        for start, stop in batches(n, self.batch_size):
            pad = call_size(stop - start, self.batch_size, self.training)
            xb, yb, wb = backend.distribute_batch(
                (
                    take(x, start, stop, pad),
                    take(labels, start, stop, pad),
                    take(weights, start, stop, pad, True),
                )
            )
            args = (trainables, non_trainables, xb, yb, {"rows": wb, "alpha": alpha})
            parts.append(unscaled(lambda scale, a=args: self._grads(*a, scale), self.loss_scale))
            parts[-1] = tree.map_structure(lambda g, r=stop - start: rows(g, r, self._stacked), parts[-1])
        grads = tree.map_structure(lambda *p: np.concatenate(p, axis=int(self._stacked)), *parts)
        if self._stacked:
            grads = normalize_and_weight(grads, self.ensemble.weights)
        return tree.map_structure(lambda g: g.astype(np.float32, copy=False), grads)

    def _grads(self, trainables, non_trainables, x, y, weights, scale):
        weights = dict(weights, scale=keras.ops.convert_to_tensor(scale, "float32"))
        _, grads = self._fn(trainables, non_trainables, x, y, weights)
        return tree.map_structure(backend.to_numpy, grads)

    @property
    def _stacked(self):
        return self.ensemble.normalize_gradients


def _warn_unseeded(models):
    """Keras' PyTorch backend draws an unseeded random layer's numbers from torch's global generator,
    outside the seed state gradkit holds fixed: such a layer gives a new mask on every call."""
    names = [name for m in models for name in _keras_internals.unseeded_random_layers(m)]
    if names:
        warnings.warn(
            f"training=True on PyTorch: the layers {names} were made without `seed=`, so Keras draws "
            "their random masks from torch's global generator: every call draws a new mask (and "
            "advances torch's global random stream). Give them `seed=` for the same mask on every call.",
            UserWarning,
            stacklevel=3,
        )


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
