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
- The logged value is the plain mean of the step values since the metrics were last reset: the
  running mean during an epoch, the epoch mean in `History`. Each step counts once, whatever its batch
  size (Keras weights `loss` by batch size instead, so a short last batch counts less there).
  `train_on_batch` resets the metrics by default, so there it is the norm of that batch.
- With `gradient_accumulation_steps=k`, a value exists only for steps that update the weights: the norm
  of the update's gradient (the mean of the k accumulated gradients); the other steps are not counted
  (before the first counted step the logged value is 0).
- NaN and inf are reported as such (one bad step makes the epoch mean NaN/inf). Under dynamic loss
  scaling, steps that the LossScaleOptimizer skips for overflow therefore show inf or NaN.
- Evaluation (`validation_data`, `evaluate`) reports no `grad_norm`.
- Cost: the norms are a few operations per step on the gradients already in memory (one reduction per
  weight, one product, the metric update). TensorFlow and JAX compile them into the step; on PyTorch
  they run eagerly right after `optimizer.apply`, which assumes the optimizer leaves the gradient
  tensors unchanged (every Keras optimizer does; each is tested). On PyTorch's CPU the squared norms
  then come to the host, and the sums and means are Python arithmetic (float64): there `grad_norm`
  reaches the logs as a Python float.

Per-layer TensorBoard histograms are not provided: the per-layer norms already reach TensorBoard as
scalars, and histograms of the gradients themselves would need the tensors out of the compiled step.

References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks", ICML,
    https://arxiv.org/abs/1211.5063.
"""

import keras
import numpy as np

from gradkit import backend, norms, validation

_ATTR = "_gradkit_grad_norm"


class GradientNormMetric(keras.metrics.Metric):
    """Running mean of per-step gradient norms: `update_state([norm_1, ..., norm_k, weight])`.

    `weight` is 1 for a step that counts; a step that does not (one that only accumulates gradients)
    passes all zeros. `sums` holds the running sums of the norms and of the weights, so a step costs
    one addition; `result()` is their ratio (0 before any counted step). Values given as a list of
    Python floats (the in-step norms on PyTorch's CPU, already on the host) are summed in Python, in
    float64, with no tensor operation, and `result()` then gives Python floats.
    """

    def __init__(self, names, name=norms.PREFIX):
        super().__init__(name=name, dtype="float32")
        self.names = list(names)
        self.sums = self.add_variable(shape=(len(self.names) + 1,), initializer="zeros", name="sums")
        self._set_host_sums(None)  # the running sums of host values, once there are any

    def _set_host_sums(self, sums):
        # Not through Metric.__setattr__: its tracker would wrap the list in a tracked list.
        object.__setattr__(self, "_host_sums", sums)

    # Tensor operators rather than keras.ops: this runs in every training step, and on eager PyTorch a
    # keras.ops call costs 15-50 us of dtype handling, more than the operation. `values` is a float32
    # tensor, or a list of Python floats (host values).
    def update_state(self, values):
        if not isinstance(values, list):
            backend.assign_add(self.sums, values)
        elif self._host_sums is None:
            self._set_host_sums(list(values))
        else:
            sums = self._host_sums
            for i, value in enumerate(values):
                sums[i] += value

    def reset_state(self):
        super().reset_state()
        self._set_host_sums(None)

    def result(self):
        if self._host_sums is not None:
            count = self._host_sums[-1] + 1e-30
            return {name: self._host_sums[i] / count for i, name in enumerate(self.names)}
        sums = self.sums.value
        # The count is a whole number: adding 1e-30 changes no count >= 1 in float32, and before any
        # counted step it makes the mean 0 / 1e-30 = 0 rather than NaN. Indexing rather than unstack:
        # one operation per name, and no keras.ops call.
        mean = sums / (sums[-1] + 1e-30)
        return {name: mean[i] for i, name in enumerate(self.names)}

    def result_names(self):
        return list(self.names)

    def get_config(self):
        return {"names": self.names, "name": self.name}


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


def _accumulation_state(model, args):
    """Before a step, what the norm of an accumulated update needs: {steps, acc, iteration}, or {}."""
    optimizer = _inner_optimizer(model.optimizer)
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if not steps:
        return {}
    state = {"steps": steps, "acc": None, "iteration": 0}  # unbuilt optimizer: nothing accumulated yet
    accumulators = getattr(optimizer, "_accumulated_gradients", None) if optimizer.built else None
    if accumulators and len(accumulators) == len(model.trainable_variables):
        if len(args) == 2:  # JAX: train_step(state, data), state[2] = the optimizer's variable values
            ids = [id(v) for v in model.optimizer.variables]

            def read(v):
                return args[0][2][ids.index(id(v))]
        else:  # TF, torch: train_step(data); copy the values before the step changes them

            def read(v):
                return keras.ops.copy(v.value)

        state.update(acc=[read(a) for a in accumulators], iteration=read(optimizer._iterations))
    return state


def _make_steps(model, metric, layers):
    """The wrapped train/test steps; the train step first reads the state an accumulated update needs."""
    context, cache = {}, {}

    def norms_fn(grads, scale):
        if len(grads) not in cache:  # built at trace time (TF, JAX); once per model state (torch)
            cache.clear()
            cache[len(grads)] = norms.NormValues(norms.layer_groups(model, layers))
        values_of = cache[len(grads)]
        if not context.get("steps"):
            return values_of(grads, scale)
        # Gradient accumulation: the applied gradient is the mean of the accumulated ones, and only
        # the step that applies it counts.
        n, acc = context["steps"], context["acc"] or [None] * len(grads)
        if scale is not None:
            grads = [g if g is None else g / scale for g in grads]
        grads = [g if g is None else (g + (0.0 if a is None else a)) / n for g, a in zip(grads, acc)]
        values = values_of(grads)
        if isinstance(values, list):  # Python floats (PyTorch's CPU); the iteration is on the host too
            return values if (int(context["iteration"]) + 1) % n == 0 else [0.0] * len(values)
        update = keras.ops.equal(keras.ops.mod(context["iteration"] + 1, n), 0)
        return keras.ops.where(update, values, 0.0)

    wrapped_train, test_step = backend.wrap_train_step(model, metric, norms_fn)

    def train_step(*args):
        context.clear()
        context.update(_accumulation_state(model, args))
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
    per_layer = validation.check_flag(per_layer, "per_layer")
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
    """Logs `grad_norm` during `fit` from the step's own gradients and keeps the value of every step.

    On `set_model` (before `fit` builds its training function) it calls `track_gradient_norm`, so
    `grad_norm` (epoch mean of the step values, see the module docstring) reaches the progress bar,
    `History`, `CSVLogger` and TensorBoard. It also keeps the value of each step, recovered in float64
    from the running means in the batch logs: step n's value is n * mean_n - (n - 1) * mean_(n-1).
    The means are float32 (float64 on PyTorch's CPU), so a value's error grows with its step index n
    within the epoch, to about 2e-7 * n * mean_n (1e-5 of the mean at step 50, 2e-4 at step 1000;
    in float64, 1e-16 * n * mean_n); after a NaN or inf step, the rest of the epoch's step values are
    NaN (its epoch mean is NaN/inf anyway). With `steps_per_execution=k`, one value per k steps: their
    mean. Nothing is read from the model during the epoch, so the callback is `async_safe` and keeps
    Keras' asynchronous callback dispatch on.
    One instance may serve several `fit` calls: values accumulate. The tracking stays installed after
    `fit` (later `fit`, `train_on_batch` and `evaluate` calls reuse the compiled step, with
    `grad_norm` in their training logs); `gradkit.untrack_gradient_norm(model)` removes it.

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

    async_safe = True  # on_train_batch_end reads only its own logs

    def __init__(self, per_layer=False):
        super().__init__()
        self.per_layer = validation.check_flag(per_layer, "per_layer")
        self.epochs, self.steps = [], {}
        self._means, self._names = {}, []

    def set_model(self, model):
        super().set_model(model)
        track_gradient_norm(model, per_layer=self.per_layer)

    def on_epoch_begin(self, epoch, logs=None):
        self._means, self._names = {}, getattr(self.model, _ATTR).names
        optimizer = _inner_optimizer(self.model.optimizer)
        self._accumulate = int(getattr(optimizer, "gradient_accumulation_steps", None) or 0)
        if self._accumulate:  # optimizer steps before this epoch, to know which steps apply an update
            self._start = int(keras.ops.convert_to_numpy(optimizer._iterations.value))

    def on_train_batch_end(self, batch, logs=None):
        # May run in a worker thread, after later steps: keep only this step's logs, keyed by step, and
        # do not touch `self.model` (on JAX that syncs the model state, racing the training loop).
        logs = logs or {}
        self._means[batch] = [logs.get(name, np.nan) for name in self._names]

    def _counted(self, steps):
        if not self._accumulate:
            return steps
        return (self._start + steps) // self._accumulate - self._start // self._accumulate

    def on_epoch_end(self, epoch, logs=None):
        rows, done, previous = [], 0, None
        for batch in sorted(self._means):
            counted = self._counted(batch + 1)  # `batch` is the index of the last step run
            mean = np.asarray(self._means[batch], np.float64)
            if counted > done:
                total = mean * counted - (0.0 if previous is None else previous * done)
                rows.append(total / (counted - done))
                done, previous = counted, mean
        self.epochs.append(int(epoch))
        for i, name in enumerate(self._names):
            history = self.steps.setdefault(name, [[] for _ in self.epochs[:-1]])
            history.append([float(row[i]) for row in rows])
