"""The in-step gradient norms as an opaque value: a float32 tensor, or a list of Python floats.

`group_norms` gives a float32 tensor, except on PyTorch's CPU, where the gradients' squares come to the
host and the norms are Python floats (a list; see `gradkit.backend.torch.norms.group_norms`). Callers
above the backend never look inside: they hand the value back to the functions here, which choose
between the tensor and the host arithmetic.

- `divide_norms(values, scale)`: the norms divided by the loss-scale factor.
- `applied_norms(values, iteration, steps)`: the norms on a step that applies an accumulated update,
  zeros on the others.
- `norm_adder(assign_add)`: the backend's `add_norms(sums, host_sums, values) -> host_sums`, adding a
  step's values into a metric's running sums.
- `norm_means(sums, host_sums, names)`: the running means by name.

No `keras.ops` on the per-step paths of eager PyTorch: there a `keras.ops` call's dtype handling costs
more than the tensor operation it wraps. Tensor operators are used instead.
"""

import keras


def divide_norms(values, scale):
    """`values / scale` (a norm is linear in its argument: this unscales the gradients).

    Args:
        values: the in-step norms, a float32 tensor `(k,)` or a list of k Python floats.
        scale: the loss-scale factor, a float or a scalar float32 tensor (a Python float where
            `values` is a list).

    Returns:
        The same kind of value as `values`.
    """
    return [value / scale for value in values] if isinstance(values, list) else values / scale


def applied_norms(values, iteration, steps):
    """`values` on a step that applies an accumulated update, zeros on the others.

    Args:
        values: the in-step norms, a float32 tensor `(k,)` or a list of k Python floats.
        iteration: the optimizer's iteration count before the step (int, or a scalar integer tensor).
        steps: int >= 1, the optimizer's `gradient_accumulation_steps`.

    Returns:
        The same kind of value as `values`: unchanged when `(iteration + 1) % steps == 0`, else zeros.
    """
    if isinstance(values, list):  # Python floats (PyTorch's CPU); the iteration is on the host too
        return values if (int(iteration) + 1) % steps == 0 else [0.0] * len(values)
    update = keras.ops.equal(keras.ops.mod(iteration + 1, steps), 0)
    return keras.ops.where(update, values, 0.0)


def norm_adder(assign_add):
    """The backend's `add_norms`, built on its `assign_add(variable, value)`.

    `add_norms(sums, host_sums, values)` adds one step's `values` into the running sums: a tensor into
    the float32 Keras variable `sums` (in place, returns `host_sums` unchanged); host floats into the
    list `host_sums` (float64 Python arithmetic, no tensor operation; a new list when `host_sums` is
    None). It returns the host sums to keep (None while only tensors were added).
    """

    def add_norms(sums, host_sums, values):
        if not isinstance(values, list):
            assign_add(sums, values)
            return host_sums
        if host_sums is None:
            return list(values)
        for i, value in enumerate(values):
            host_sums[i] += value
        return host_sums

    return add_norms


def norm_means(sums, host_sums, names, last, host_last):
    """`{name: sum_i / count}` from running sums whose last entry is the count of steps.

    Args:
        sums: the float32 Keras variable `(len(names) + 1,)` of the tensor sums.
        host_sums: the list of host sums, or None (then `sums` is read).
        names: the k log keys.
        last: the float32 Keras variable `(k,)` of the last counted step's values (NaN before any).
        host_last: the list of the last counted host values, or None.

    Returns:
        dict of k Python floats (host values) or k scalar float32 tensors; where no step counted since
        the sums were reset, the last counted step's values.
    """
    if host_sums is not None and host_sums[-1] != 0:  # NaN counts (a NaN step) give NaN means
        count = host_sums[-1]
        return {name: host_sums[i] / count for i, name in enumerate(names)}
    if host_last is not None:
        return dict(zip(names, host_last))
    values = sums.value
    count = values[-1]
    # A count is a whole number: adding 1e-30 changes no count >= 1 in float32 and avoids 0 / 0.
    mean = keras.ops.where(count != 0, values[:-1] / (count + 1e-30), last.value)
    # One unstack, not k slices: on TensorFlow each slice is 4 graph ops run every step (a plain step
    # reports these means too).
    return dict(zip(names, keras.ops.unstack(mean)))
