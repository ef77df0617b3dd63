"""`GradientNormCallback`: `grad_norm` in the logs of `fit`, and the value of every step."""

import os

import keras
import numpy as np

from gradkit import _checks, _keras_internals
from gradkit.monitor import _histograms
from gradkit.monitor._groups import check_every_n_steps, check_include, noise_slots
from gradkit.monitor._tracking import inner_optimizer, install, tracked_metric, untrack_gradient_norm


class GradientNormCallback(keras.callbacks.Callback):
    """Logs `grad_norm` (and the diagnostics of `include`) during `fit` from the step's own tensors, and
    keeps the value of every recorded step.

    On `set_model` (before `fit` builds its training function) it calls `track_gradient_norm`, so
    `grad_norm` and the other keys (epoch mean of the step values, see the `gradkit.monitor`
    docstring) reach the progress bar, `History`, `CSVLogger` and TensorBoard.

    It also keeps the value of each recorded step, recovered in float64 from the running means in the
    batch logs: step n's value is n * mean_n - (n - 1) * mean_(n-1). The means are float32 (float64 on
    PyTorch's CPU), so a value's error grows with its step index n within the epoch, to about
    2e-7 * n * mean_n (1e-5 of the mean at step 50, 2e-4 at step 1000; in float64, 1e-16 * n * mean_n);
    after a NaN or inf step, the rest of the epoch's step values are NaN (its epoch mean is NaN/inf
    anyway). With `steps_per_execution=k`, one value per k steps: their mean. `noise_scale` is logged
    as the smoothed value after each step, and kept as logged. Nothing is read from the model during
    the epoch, so the callback is `async_safe` and keeps Keras' asynchronous callback dispatch on.

    One instance may serve several `fit` calls: values accumulate. When training ends the model is
    left as the callback found it: untracked, or tracked as it was before (`track_gradient_norm`).
    Each `fit` with the callback therefore builds its training function anew (one trace on TensorFlow
    and JAX; two with `every_n_steps` > 1 or gradient accumulation, where the steps that record nothing
    run the class's own step); to train one model in many short `fit` calls, `track_gradient_norm` it
    once instead.

    Args:
        per_layer: also log `"<key>/<layer name>"` per top-level layer. Defaults to False.
        include: the groups of keys, as in `track_gradient_norm` ("norm", "clipped", "params",
            "updates", "health", "noise_scale", or "all"). Defaults to ("norm",).
        every_n_steps: int >= 1, record every n-th applied update only; the other steps run the
            model class's own training step (see `track_gradient_norm`). Defaults to 1.
        histogram_freq: int >= 0; every `histogram_freq`-th epoch (0, n, 2n, ..., as
            `keras.callbacks.TensorBoard` counts them), write a histogram of the gradient entries of
            each top-level trainable layer (30 equal-width bins from min to max; loss scale divided
            out) at the epoch's first recorded update: the step's own gradients, taken inside the
            step (`gradkit.monitor._histograms`), written at the epoch's end as
            `"<layer>/gradient_histogram"` at step = epoch. 0: none. Needs TensorFlow and
            TensorBoard installed (on every backend, as Keras' TensorBoard callback). Defaults to 0.
        log_dir: the TensorBoard log directory; the histograms go to `<log_dir>/train`, where
            `keras.callbacks.TensorBoard(log_dir)` writes its scalars and weight histograms, through
            TensorFlow's summary writer as it does. Defaults to "logs" (Keras' default).

    Attributes:
        epochs: list of int, the epoch index (as `fit` counts it) of each recorded epoch.
        steps: dict `{log key: [[step values of epoch 0], [epoch 1], ...]}`, Python floats, one inner
            list per entry of `epochs` (steps that update no weights, or that `every_n_steps` skips,
            are left out).

    Raises:
        TypeError: `per_layer` is not a bool; `include` is not a string or a list of strings;
            `every_n_steps` or `histogram_freq` is not an int; `log_dir` is not a path.
        ValueError: an unknown group in `include`; `every_n_steps < 1`; `histogram_freq < 0`, or
            `histogram_freq > 0` without TensorFlow/TensorBoard installed; (when `fit` starts)
            `per_layer=True` or `histogram_freq > 0` on a model without a trainable top-level
            layer; (at the first step, before any update) "noise_scale" with batches of one row.

    References:
        Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks",
        ICML, https://arxiv.org/abs/1211.5063.

    Example:
        >>> cb = gradkit.GradientNormCallback()                                      # doctest: +SKIP
        >>> history = model.fit(x, y, epochs=3, callbacks=[cb])                      # doctest: +SKIP
        >>> history.history["grad_norm"], cb.steps["grad_norm"][0][:3]               # doctest: +SKIP
    """

    async_safe = True  # on_train_batch_end reads only its own logs

    def __init__(self, per_layer=False, include=("norm",), every_n_steps=1, histogram_freq=0, log_dir="logs"):
        super().__init__()
        self.per_layer = _checks.check_flag(per_layer, "per_layer")
        self.include = check_include(include)
        self.every_n_steps = check_every_n_steps(every_n_steps)
        self.histogram_freq = _histograms.check_histogram_freq(histogram_freq)
        if not isinstance(log_dir, (str, os.PathLike)):
            _checks.fail("log_dir", "a str or os.PathLike", log_dir, TypeError)
        self.log_dir = os.fspath(log_dir)
        self.epochs, self.steps = [], {}
        self._means, self._names, self._previous = {}, [], None

    def set_model(self, model):
        super().set_model(model)
        metric = tracked_metric(model)
        self._previous = dict(metric.config) if metric is not None else None
        install(model, self.per_layer, self.include, self.every_n_steps, histograms=self.histogram_freq > 0)

    def on_train_end(self, logs=None):
        if self._previous is None:
            untrack_gradient_norm(self.model)
        else:
            previous = self._previous
            install(
                self.model,
                previous["per_layer"],
                previous["include"],
                previous["every_n_steps"],
                previous["histograms"],
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._means, self._names = {}, tracked_metric(self.model).names
        self._smoothed = noise_slots(self._names)
        optimizer = inner_optimizer(self.model.optimizer)
        self._accumulate = int(getattr(optimizer, "gradient_accumulation_steps", None) or 1)
        # Optimizer steps before this epoch, to know which steps are recorded.
        iterations = _keras_internals.optimizer_iterations(optimizer)
        self._start = int(keras.ops.convert_to_numpy(iterations.value))
        if self._histogram_due(epoch):  # the step captures from this epoch's first recorded update on
            tracked_metric(self.model).hist_from.assign(float(self._start))

    def _histogram_due(self, epoch):
        return bool(self.histogram_freq) and epoch % self.histogram_freq == 0

    def _write_histograms(self, epoch):
        metric = tracked_metric(self.model)
        if float(keras.ops.convert_to_numpy(metric.hist_from.value)) != float("inf"):
            return  # no recorded update this epoch
        names = _histograms.layers_of(self.model)[0]
        _histograms.write(self.log_dir, names, metric.histogram_table(), epoch)

    def on_train_batch_end(self, batch, logs=None):
        # May run in a worker thread, after later steps: keep only this step's logs, keyed by step, and
        # do not touch `self.model` (on JAX that syncs the model state, racing the training loop).
        logs = logs or {}
        self._means[batch] = [logs.get(name, np.nan) for name in self._names]

    def _counted(self, steps):
        """The number of recorded steps among the epoch's first `steps` (see `_tracking.sampled`)."""
        k, n = self._accumulate, self.every_n_steps
        first, last = self._start // k, (self._start + steps) // k  # updates applied before, after
        return (last + n - 1) // n - (first + n - 1) // n

    def on_epoch_end(self, epoch, logs=None):
        rows, done, previous = [], 0, None
        for batch in sorted(self._means):
            counted = self._counted(batch + 1)  # `batch` is the index of the last step run
            mean = np.asarray(self._means[batch], np.float64)
            if counted > done:
                total = mean * counted - (0.0 if previous is None else previous * done)
                row = total / (counted - done)
                row[self._smoothed] = mean[self._smoothed]  # logged as the step's own value
                rows.append(row)
                done, previous = counted, mean
        if self._histogram_due(epoch):
            self._write_histograms(epoch)
        self.epochs.append(int(epoch))
        for i, name in enumerate(self._names):
            history = self.steps.setdefault(name, [[] for _ in self.epochs[:-1]])
            history.append([float(row[i]) for row in rows])
