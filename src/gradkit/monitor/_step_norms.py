"""The norms of one training step's gradients (`NormValues`) and their running mean (`GradientNormMetric`).

Both run inside every training step, so each costs a fixed handful of operations whatever the number of
layers. What they hold is the backend's opaque norm value (a float32 tensor, or Python floats on
PyTorch's CPU): they pass it to `gradkit.backend` (`group_norms`, `divide_norms`, `add_norms`,
`norm_means`) and never look inside.
"""

import contextlib

import keras
import numpy as np

from gradkit import backend
from gradkit.monitor import _noise_scale
from gradkit.monitor._gradient_norm import PREFIX


class NormValues:
    """Callable `(grads, scale) -> vector [global norm, norm of group 1, ..., 1.0]` (in-step).

    One backend call, `backend.group_norms`, takes the squared norm of each gradient (one native
    reduction, no copy) and sums them into the global and per-group norms with one product by a
    constant 0/1 matrix `(1 + groups + 1, n + 1)`. The last entry, 1.0, is the step's weight in
    `GradientNormMetric`: the matrix's last row picks the extra entry `last` = scale**2 (or 1), whose
    square root divided by `scale` is 1. The norms are divided by `scale` (the loss-scale factor, None
    for none; a norm is linear in its argument, so this equals unscaling the gradients). None gradients
    count as zero; NaN and inf propagate to every norm whose weights hold them.

    No `keras.ops` on the per-step path: on eager PyTorch its dtype handling outweighs the tensor
    operation it wraps.

    Args:
        groups: list of lists of int, the indices (in the gradient list) of each group's weights, as
            `layer_groups` gives them.

    Call args:
        grads: list of n dense gradients (tensors of any float dtype) or None.
        scale: the loss-scale factor (float or scalar tensor), or None. Defaults to None.

    Returns:
        The backend's opaque norm value of `len(groups) + 2` entries (hand it to `backend.add_norms`).
    """

    def __init__(self, groups):
        self.groups = [list(group) for group in groups]
        self._cache = {}

    def _constants(self, present):
        """The 0/1 matrix (global row, group rows, weight row) and a float32 1.0, as tensors."""
        key = tuple(present)
        if key in self._cache:
            return self._cache[key]
        column = {i: k for k, i in enumerate(present)}
        matrix = np.zeros((2 + len(self.groups), len(present) + 1), np.float32)
        matrix[0, :-1] = 1.0
        for row, group in enumerate(self.groups, start=1):
            matrix[row, [column[i] for i in group if i in column]] = 1.0
        matrix[-1, -1] = 1.0
        constants = keras.ops.convert_to_tensor(matrix), keras.ops.convert_to_tensor(1.0, "float32")
        if backend.STEPS_RUN_EAGERLY:  # else built inside each trace (a tensor is tied to its graph)
            self._cache[key] = constants
        return constants

    def __call__(self, grads, scale=None):
        present = [i for i, g in enumerate(grads) if g is not None]
        matrix, one = self._constants(present)
        last = one if scale is None else scale * scale
        values = backend.group_norms([grads[i] for i in present], matrix, last)
        if scale is None:
            return values
        return backend.divide_norms(values, scale)


class GradientNormMetric(keras.metrics.Metric):
    """Running mean of per-step values: `update_state([value_1, ..., value_k, weight])`.

    `weight` is 1 for a step that counts; a step that does not (one that only accumulates gradients, or
    one that `every_n_steps` skips) passes all zeros. `sums` holds the running sums of the values and of
    the weights, so a step costs one addition; `result()` is their ratio. `last` holds the values of the
    last counted step and survives `reset_state`: before any counted step since the reset, `result()`
    is that step's values (NaN before any counted step at all), never a made-up 0. Values the backend
    keeps on the host (Python floats, PyTorch's CPU) are summed on the host by `backend.add_norms`, in
    float64, and `result()` then gives Python floats.

    The noise-scale keys (`noise_slots`, r of them) are the exception: a step's values then hold 2r
    more entries before the weight, the step's estimates of |G|^2 and tr(Sigma) per row; `ema` (never
    reset: the averages run across epochs and `fit` calls) smooths them (`_noise_scale`), the step's
    value of each noise key is the smoothed ratio, and `result()` gives that of the last counted step.

    The steps that `every_n_steps` skips run the class's own training step (`_chosen_steps`). On
    TensorFlow and JAX the metric reports nothing while that step is traced (`quiet`), so its graph
    computes nothing of the metric's; the host completes its logs (`complete`) with the values of the
    last recorded step (`keep`), as Python floats, until `reset_state`.

    Args:
        names: list of k log keys (`"grad_norm"`, then `"grad_norm/<layer name>"`...).
        name: the metric's name. Defaults to `"grad_norm"`.
        noise_slots: the indices in `names` of the noise-scale keys. Defaults to none.
    """

    def __init__(self, names, name=PREFIX, noise_slots=(), hist_size=0):
        super().__init__(name=name, dtype="float32")
        self.names, self.noise_slots = list(names), [int(i) for i in noise_slots]
        self.hist_size = int(hist_size)
        if self.hist_size:  # the last captured histogram table, and the iteration to capture from
            self.hist = self.add_variable(shape=(self.hist_size,), initializer="zeros", name="hist")
            inf = keras.initializers.Constant(float("inf"))
            self.hist_from = self.add_variable(shape=(), initializer=inf, name="hist_from")
        object.__setattr__(self, "_host_hist", None)
        self.sums = self.add_variable(shape=(len(self.names) + 1,), initializer="zeros", name="sums")
        nan = keras.initializers.Constant(float("nan"))
        self.last = self.add_variable(shape=(len(self.names),), initializer=nan, name="last")
        if self.noise_slots:
            size = 2 * len(self.noise_slots) + 1
            self.ema = self.add_variable(shape=(size,), initializer="zeros", name="ema")
        self._set_host(None, None)  # the running sums and last values on the host, once there are any
        for attribute, value in [("_host_ema", None), ("_quiet", False), ("_last_copy", None)]:
            object.__setattr__(self, attribute, value)
        self._keep(None, None)

    def _keep(self, logs, floats):
        # The last recorded step's logs (as the step returned them), and their values as Python floats.
        object.__setattr__(self, "_kept", logs)
        object.__setattr__(self, "_kept_floats", floats)

    def _set_host(self, sums, last):
        # Not through Metric.__setattr__: its tracker would wrap the lists in tracked lists.
        object.__setattr__(self, "_host_sums", sums)
        object.__setattr__(self, "_host_last", last)

    def _noise(self, values):
        """The step's values with the noise keys' smoothed ratios in place of the estimates."""
        k, r = len(self.names), len(self.noise_slots)
        if isinstance(values, list):
            step = values[k : k + 2 * r]
            valid = values[-1] != 0 and all(np.isfinite(step))
            ema, noise = _noise_scale.smoothed_host(self._host_ema, step, valid)
            object.__setattr__(self, "_host_ema", ema)
            out = list(values[:k])
            for j, i in enumerate(self.noise_slots):
                out[i] = noise[j]
            return out + [values[-1]]
        ops = keras.ops
        step = values[k : k + 2 * r]
        valid = ops.logical_and(values[-1] != 0, ops.all(ops.isfinite(step)))
        ema, noise = _noise_scale.smoothed(self.ema.value, step, valid)
        self.ema.assign(ema)
        where = np.zeros(k, bool)
        where[self.noise_slots] = True
        index = np.zeros(k, "int32")
        index[self.noise_slots] = np.arange(r)
        filled = ops.where(
            ops.convert_to_tensor(where), ops.take(noise, ops.convert_to_tensor(index)), values[:k]
        )
        return ops.concatenate([filled, values[-1:]])

    def _histograms(self, values):
        """Keeps the step's histogram table where its `due` flag is set; the values without them."""
        h = self.hist_size
        if isinstance(values, list):
            if values[-2] > 0:
                object.__setattr__(self, "_host_hist", list(values[-(h + 2) : -2]))
                self.hist_from.assign(float("inf"))
            return values[: -(h + 2)] + values[-1:]
        due = values[-2] > 0
        self.hist.assign(keras.ops.where(due, values[-(h + 2) : -2], self.hist.value))
        self.hist_from.assign(keras.ops.where(due, float("inf"), self.hist_from.value))
        return keras.ops.concatenate([values[: -(h + 2)], values[-1:]])

    def histogram_table(self):
        """The last captured histogram table (numpy float64), as `_histograms.table` made it."""
        if self._host_hist is not None:
            return np.asarray(self._host_hist, np.float64)
        return np.asarray(keras.ops.convert_to_numpy(self.hist.value), np.float64)

    def update_state(self, values):
        """Adds one step's values (from `NormValues`, or a list of k + 1 floats)."""
        if self.hist_size:
            values = self._histograms(values)
        if self.noise_slots:
            values = self._noise(values)
        if isinstance(values, list):
            last = values[:-1] if values[-1] != 0 else self._host_last
            self._set_host(backend.add_norms(self.sums, self._host_sums, values), last)
            return
        backend.add_norms(self.sums, None, values)
        self.last.assign(keras.ops.where(values[-1] != 0, values[:-1], self.last.value))

    def reset_state(self):
        self.sums.assign(keras.ops.zeros(self.sums.shape, "float32"))
        self._set_host(None, self._host_last)
        self._keep(None, None)
        # Until the next counted step, `result()` is the last one's values (`complete` reads them): a
        # copy, as JAX's `fit` detaches the variables and donates their buffers to its steps.
        object.__setattr__(self, "_last_copy", keras.ops.copy(self.last.value))

    @contextlib.contextmanager
    def quiet(self):
        """A context in which `result()` reports nothing (`{}`): TF and JAX trace the plain step in it."""
        object.__setattr__(self, "_quiet", True)
        try:
            yield
        finally:
            object.__setattr__(self, "_quiet", False)

    def keep(self, logs):  # the logs of a recorded step, for `complete` (a reference: nothing read)
        self._keep(logs, None)

    def complete(self, logs):
        """`logs`, with the metric's keys added where the step reported none (the plain step of TF, JAX).

        Args:
            logs: dict, the logs a training function returned.

        Returns:
            `logs` where it has every key of `names`; else a new dict with, as Python floats read once,
            the values of the last recorded step (`keep`), or of the last counted one before it.
        """
        if all(name in logs for name in self.names):
            return logs
        if self._kept_floats is None:
            if self._kept is not None:
                floats = [float(self._kept[name]) for name in self.names]
            elif self._host_last is not None:
                floats = [float(value) for value in self._host_last]
            else:
                last = self._last_copy if self._last_copy is not None else self.last.value
                floats = np.asarray(keras.ops.convert_to_numpy(last), np.float64).tolist()
            self._keep(self._kept, dict(zip(self.names, floats)))
        return {**logs, **self._kept_floats}

    def result(self):
        if self._quiet:
            return {}
        out = backend.norm_means(self.sums, self._host_sums, self.names, self.last, self._host_last)
        for i in self.noise_slots:  # the smoothed value after the last counted step, not a mean
            out[self.names[i]] = self._host_last[i] if self._host_last is not None else self.last.value[i]
        return out

    def result_names(self):
        return list(self.names)

    def get_config(self):
        return {
            "names": self.names,
            "name": self.name,
            "noise_slots": self.noise_slots,
            "hist_size": self.hist_size,
        }
