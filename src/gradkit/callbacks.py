"""`grad_norm` in the logs of `fit` and `train_on_batch`, from the gradients the step already computed.

`track_gradient_norm(model)` makes the model's training step hand the gradients it gives the optimizer
to a small Keras metric, so `grad_norm` (and with `per_layer=True`, `grad_norm/<layer name>`) appears
like any metric: progress bar, `History.history`, `CSVLogger` columns, TensorBoard scalars and
`train_on_batch(..., return_dict=True)`. There is no second forward or backward pass. Semantics:

- The value of a step is the global L2 norm (see `gradkit.norms`) of the gradient of that step's loss
  (the loss `fit` minimizes, regularization included), in float32, BEFORE clipping (`clipnorm`,
  `global_clipnorm`, `clipvalue` act inside the optimizer) and with the loss-scale factor of mixed
  precision (`LossScaleOptimizer.dynamic_scale`, or an optimizer's `loss_scale_factor`) divided out.
  It equals `gradkit.gradient_norm` on the same weights and batch.
- The logged value is the mean of the step values since the metrics were last reset, like Keras'
  `loss`: the running mean during an epoch, the epoch mean in `History`. `train_on_batch` resets the
  metrics by default, so there it is the norm of that batch.
- With `gradient_accumulation_steps=k`, a value exists only for steps that update the weights: the norm
  of the update's gradient (the mean of the k accumulated gradients); the other steps are not counted.
- NaN and inf are reported as such (one bad step makes the epoch mean NaN/inf). Under dynamic loss
  scaling, steps that the LossScaleOptimizer skips for overflow therefore show inf or NaN.
- Evaluation (`validation_data`, `evaluate`) reports no `grad_norm`.

Per-layer TensorBoard histograms are not provided: the per-layer norms already reach TensorBoard as
scalars, and histograms of the gradients themselves would need the tensors out of the compiled step.

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063.
"""

import warnings

import keras
import numpy as np

from gradkit import backend, norms

_ATTR = "_gradkit_grad_norm"


class GradientNormMetric(keras.metrics.Metric):
    """Running mean of per-step gradient norms, plus a buffer of the latest step values.

    `update_state(values)` takes `[norm_1, ..., norm_k, weight]`: weight 1 for a step that counts, and
    all zeros for one that does not (a step that only accumulates gradients). `sums` holds the running
    sums of the norms and of the weights, so a step costs one addition; `result()` is their ratio.
    `steps` is a shift register of the last `buffer_size` rows (newest last), read by
    `GradientNormCallback`; `reset_state` clears `sums` only, so the rows survive evaluation's reset.
    """

    def __init__(self, names, buffer_size=256, name=norms.PREFIX):
        super().__init__(name=name, dtype="float32")
        self.names, self.buffer_size = list(names), int(buffer_size)
        k = len(self.names) + 1
        self.sums = self.add_variable(shape=(k,), initializer="zeros", name="sums")
        self.steps = self.add_variable(shape=(self.buffer_size, k), initializer="zeros", name="steps")

    def update_state(self, values):
        values = keras.ops.cast(values, "float32")
        self.sums.assign(self.sums.value + values)
        self.steps.assign(keras.ops.concatenate([self.steps.value[1:], values[None]]))

    def reset_state(self):
        self.sums.assign(keras.ops.zeros_like(self.sums.value))

    def result(self):
        sums = self.sums.value
        mean = sums[:-1] / keras.ops.maximum(sums[-1], 1.0)  # the weights sum to an integer: 0 gives 0
        return dict(zip(self.names, keras.ops.unstack(mean)))

    def result_names(self):
        return list(self.names)

    def get_config(self):
        return {"names": self.names, "buffer_size": self.buffer_size, "name": self.name}


def _inner_optimizer(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)


def _attach(model, metric):
    """Sets the metric as a tracked attribute (built subclassed models lock their tracker)."""
    tracker = getattr(model, "_tracker", None)
    locked = bool(tracker is not None and tracker.locked)
    if locked:
        tracker.unlock()
    try:
        setattr(model, _ATTR, metric)
    finally:
        if locked:
            tracker.lock()


def untrack_gradient_norm(model):
    """Undoes `track_gradient_norm`: restores the class's train/test steps and removes the metric."""
    metric = vars(model).get(_ATTR)
    if metric is None:
        return model
    if getattr(model, "_tracker", None) is not None:
        model._tracker.untrack(metric)
    delattr(model, _ATTR)
    for name in ("train_step", "test_step"):
        vars(model).pop(name, None)
    model.train_function = None
    model.test_function = None
    return model


def _make_steps(model, metric, layers):
    """The wrapped train/test steps; the train step first reads the state an accumulated update needs."""
    context, cache = {}, {}

    def norms_fn(grads, scale):
        grads = [keras.ops.convert_to_tensor(g) if hasattr(g, "dense_shape") else g for g in grads]
        if len(grads) not in cache:  # computed at trace time (TF, JAX); once per model state (torch)
            cache.clear()
            cache[len(grads)] = norms.layer_groups(model, layers)
        if not context.get("steps"):
            values = norms.norm_values(grads, cache[len(grads)], scale)
            return keras.ops.concatenate([values, keras.ops.ones((1,), "float32")])
        # Gradient accumulation: the applied gradient is the mean of the accumulated ones, and only
        # the step that applies it counts.
        n, acc = context["steps"], context["acc"] or [None] * len(grads)
        grads = [g if g is None else (g / scale + (0.0 if a is None else a)) / n for g, a in zip(grads, acc)]
        values = norms.norm_values(grads, cache[len(grads)])
        values = keras.ops.concatenate([values, keras.ops.ones((1,), "float32")])
        update = keras.ops.equal(keras.ops.mod(context["iteration"] + 1, n), 0)
        return keras.ops.where(update, values, 0.0)

    wrapped_train, test_step = backend.wrap_train_step(model, metric, norms_fn)

    def train_step(*args):
        # TF and torch call train_step(data); JAX calls train_step(state, data), state[2] = optimizer values.
        context.clear()
        optimizer = _inner_optimizer(model.optimizer)
        steps = getattr(optimizer, "gradient_accumulation_steps", None)
        if steps:
            context.update(steps=steps, acc=None, iteration=0)
        if (
            steps
            and optimizer.built
            and len(optimizer._accumulated_gradients) == len(model.trainable_variables)
        ):
            if len(args) == 2:
                ids = [id(v) for v in model.optimizer.variables]
                values = args[0][2]

                def read(v):
                    return values[ids.index(id(v))]
            else:

                def read(v):
                    return keras.ops.copy(v.value)

            context["acc"] = [read(a) for a in optimizer._accumulated_gradients]
            context["iteration"] = read(optimizer._iterations)
        return wrapped_train(*args)

    train_step._gradkit = metric
    return train_step, test_step


def track_gradient_norm(model, per_layer=False):
    """Makes `model`'s training step log `grad_norm` (see the module docstring for the semantics).

    Idempotent: calling it again with the same `per_layer` changes nothing; with another value the
    metric is replaced. Survives `compile()` (the step functions are rebuilt on the next `fit`). The
    layers of the per-layer norms are fixed now: track again after changing which layers are trainable.

    Args:
        model: a `keras.Model`; built when `per_layer=True` (call it on data, or give it an Input).
        per_layer: also log `"grad_norm/<layer name>"` for each top-level layer with trainable
            weights. Defaults to False.

    Returns:
        The model.

    Raises:
        TypeError: `model` is not a `keras.Model`; `per_layer` is not a bool.
        ValueError: `per_layer=True` on an unbuilt model.

    Example:
        >>> gradkit.track_gradient_norm(model)                                 # doctest: +SKIP
        >>> model.train_on_batch(x, y, return_dict=True)["grad_norm"]          # doctest: +SKIP
        0.8314
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"`model` must be a keras.Model. Received: {type(model).__name__}")
    per_layer = norms.check_bool(per_layer, "per_layer")
    if per_layer and not model.built:
        raise ValueError(
            "`per_layer=True` needs a built model (its layers' weights must exist): call the model on a "
            "batch or start it with keras.Input. Received: an unbuilt model"
        )
    layers = norms.norm_layers(model) if per_layer else []
    names = norms.result_names(layers)
    metric = vars(model).get(_ATTR)
    installed = getattr(vars(model).get("train_step"), "_gradkit", None)
    if metric is not None and installed is metric and metric.names == names:
        return model
    untrack_gradient_norm(model)
    metric = GradientNormMetric(names)
    _attach(model, metric)
    model.train_step, model.test_step = _make_steps(model, metric, layers)
    model.train_function = None
    model.test_function = None
    return model


class GradientNormCallback(keras.callbacks.Callback):
    """Logs `grad_norm` during `fit` at near-zero cost and keeps the value of every step.

    On `set_model` (before `fit` builds its training function) it calls `track_gradient_norm`, so
    `grad_norm` (epoch mean of the step values, see the module docstring) reaches the progress bar,
    `History`, `CSVLogger` and TensorBoard. It also keeps each step's exact float32 value, read from
    the metric after the step (no extra computation; with `steps_per_execution=k`, one value per k
    steps, that of the last). One instance may serve several `fit` calls: values accumulate.

    Args:
        per_layer: also log `"grad_norm/<layer name>"` per top-level layer. Defaults to False.

    Attributes:
        epochs: list of int, the epoch index (as `fit` counts it) of each recorded epoch.
        steps: dict `{log key: [[step values of epoch 0], [epoch 1], ...]}`, Python floats, one inner
            list per entry of `epochs` (steps that update no weights are left out).

    Raises:
        TypeError: `per_layer` is not a bool.

    Example:
        >>> cb = gradkit.GradientNormCallback()                                      # doctest: +SKIP
        >>> history = model.fit(x, y, epochs=3, callbacks=[cb])                      # doctest: +SKIP
        >>> history.history["grad_norm"], cb.steps["grad_norm"][0][:3]               # doctest: +SKIP
    """

    def __init__(self, per_layer=False):
        super().__init__()
        self.per_layer = norms.check_bool(per_layer, "per_layer")
        self.epochs, self.steps = [], {}
        self._rows = []

    def set_model(self, model):
        super().set_model(model)
        track_gradient_norm(model, per_layer=self.per_layer)

    def _collect(self, steps_done):
        """Reads the rows of the steps run since the last read (the newest rows of the buffer)."""
        new = steps_done - self._steps_read
        if new <= 0:
            return
        model, metric = self.model, getattr(self.model, _ATTR)
        state = getattr(model, "_jax_state", None)  # JAX keeps the live state outside the variables
        if state and not getattr(model, "_jax_state_synced", True):
            ids = [id(v) for v in model.metrics_variables]
            buffer = state["metrics_variables"][ids.index(id(metric.steps))]
        else:
            buffer = metric.steps.value
        rows = keras.ops.convert_to_numpy(buffer)[-new:].astype(np.float64)
        if new > len(rows):
            warnings.warn(
                f"GradientNormCallback kept only the last {len(rows)} of {new} step values.", stacklevel=2
            )
        self._rows.extend(row[:-1] for row in rows if row[-1] > 0)
        self._steps_read = steps_done

    def on_train_begin(self, logs=None):
        self._per_call = int(getattr(self.model, "steps_per_execution", 1) or 1)
        self._size = getattr(self.model, _ATTR).buffer_size

    def on_epoch_begin(self, epoch, logs=None):
        self._rows, self._steps_read, self._steps_done = [], 0, 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps_done = batch + 1  # `batch` is the index of the last step run
        if self._steps_done - self._steps_read + self._per_call > self._size:
            self._collect(self._steps_done)  # before the next call could push rows out

    def on_epoch_end(self, epoch, logs=None):
        self._collect(self._steps_done)
        self.epochs.append(int(epoch))
        for i, name in enumerate(getattr(self.model, _ATTR).names):
            history = self.steps.setdefault(name, [[] for _ in self.epochs[:-1]])
            history.append([float(row[i]) for row in self._rows])
        self._rows = []
