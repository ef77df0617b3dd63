"""`track_gradient_norm` / `untrack_gradient_norm`: the model's training step hands its gradients to a metric.

The steps are wrapped by `gradkit.backend.wrap_train_step` (which knows each backend's step); this module
chooses what is recorded: the norms of the gradients, or under gradient accumulation those of the
applied update; `_chosen_steps` runs the class's own step on the steps that record nothing.
"""

from gradkit import _checks, _keras_internals, backend
from gradkit.gradients import check_model
from gradkit.monitor import _histograms
from gradkit.monitor._chosen_steps import make_train_function_of
from gradkit.monitor._gradient_norm import layer_groups, norm_layers
from gradkit.monitor._groups import (
    check_every_n_steps,
    check_include,
    log_names,
    needs_halves,
    needs_weights,
    noise_slots,
)
from gradkit.monitor._step_norms import GradientNormMetric, NormValues
from gradkit.monitor._step_state import applied_gradients, inner_optimizer, sampled, step_state  # noqa: F401
from gradkit.monitor._step_stats import StepStatistics

_ATTR = "_gradkit_grad_norm"


def tracked_metric(model):
    """The `GradientNormMetric` that `track_gradient_norm` attached to `model`, or None."""
    return vars(model).get(_ATTR)


def untrack_gradient_norm(model):
    """Undoes `track_gradient_norm`: restores the class's train/test steps and removes the metric.

    Args:
        model: a `keras.Model` (one that is not tracked is returned unchanged).

    Returns:
        The model.
    """
    metric = tracked_metric(model)
    if metric is None:
        return model
    _keras_internals.set_tracked_attribute(model, _ATTR, None)
    for name in ("train_step", "test_step", "make_train_function"):
        vars(model).pop(name, None)
    model.train_function = None
    model.test_function = None
    return model


def _norms_fn(model, layers, context):
    """`grad_norm` alone, every step: `NormValues` (zeros on steps that only accumulate)."""
    cache = {}

    def norms_fn(grads, scale):
        if len(grads) not in cache:  # built at trace time (TF, JAX); once per model state (torch)
            cache.clear()
            cache[len(grads)] = NormValues(layer_groups(model, layers))
        values_of = cache[len(grads)]
        if not context.get("steps"):
            return values_of(grads, scale)
        grads = applied_gradients(grads, scale, context)
        return backend.applied_norms(values_of(grads), context["iteration"], context["steps"])

    return norms_fn


def _stats_fn(model, layers, context, groups, every_n_steps, histograms=False):
    """Any groups, any `every_n_steps`: `StepStatistics` inside `backend.cond` on sampled steps."""
    cache = {}

    def stats_fn(grads, scale, before=None, after=None, halves=None):
        optimizer = inner_optimizer(model.optimizer)
        key = (len(grads), id(optimizer))
        if key not in cache:  # built at trace time (TF, JAX); once per model state (torch)
            cache.clear()
            shapes = [v.shape for v in model.trainable_variables]
            cache[key] = StepStatistics(groups, layer_groups(model, layers), shapes, optimizer)
            cache["hist"] = _histograms.layers_of(model)[1] if histograms else None
        stats, hist_rows = cache[key], cache["hist"]

        def compute():
            half = None
            if halves is not None:  # the halves' gradient: traced into this branch only
                g1, b1, b, *other = halves()  # `other`: the other rows' gradient, where the backend has it
                check_rows(b)
                half = (grads, g1, b1, b, scale, *other)
            accumulated = applied_gradients(grads, scale, context) if context.get("steps") else None
            if accumulated is not None:
                values = stats(accumulated, None, before, after, half)
            else:
                values = stats(grads, scale, before, after, half)
            if hist_rows is None:
                return values
            unscaled = accumulated or [g if g is None or scale is None else g / scale for g in grads]
            shapes = [v.shape for v in model.trainable_variables]
            return _histograms.appended(values, context, unscaled, hist_rows, shapes)

        size = stats.size + (_histograms.size(len(hist_rows)) if hist_rows is not None else 0)
        if "iteration" not in context or context.get("chosen"):  # chosen: runs on recorded steps only
            return compute()
        return backend.cond(stats_fn.sampled(), compute, size)

    def is_sampled():
        if "iteration" not in context or context.get("chosen"):
            return True
        return sampled(context["iteration"], context["steps"], every_n_steps)

    stats_fn.needs_weights, stats_fn.sampled = needs_weights(groups), is_sampled
    seen = {"full": False}  # a batch of 2 or more rows was seen

    def check_rows(b):
        """A batch of fewer than 2 rows (known when traced, or eagerly) before any of 2 or more: error."""
        if isinstance(b, int) and b >= 2:
            seen["full"] = True
        elif isinstance(b, int) and not seen["full"]:
            expected = "without 'noise_scale' for batches of fewer than 2 rows (the noise scale compares "
            _checks.fail("include", expected + f"the gradients of a batch's two halves; one has {b})", groups)

    stats_fn.needs_halves, stats_fn.check_rows = needs_halves(groups), check_rows
    return stats_fn


def _make_steps(model, metric, layers, groups, every_n_steps):
    """The wrapped train/test steps; the train step first reads the state sampling and an accumulated
    update need."""
    context = {}
    if groups == ("norm",) and every_n_steps == 1 and not metric.hist_size:
        norms_fn = _norms_fn(model, layers, context)
    else:
        norms_fn = _stats_fn(model, layers, context, groups, every_n_steps, bool(metric.hist_size))
    wrapped_train, test_step = backend.wrap_train_step(model, metric, norms_fn)
    plain_train = backend.plain_train_step(metric, type(model), model)
    mode = {"chosen": False, "plain": False}  # set by `_chosen_steps` (when built, before each call)

    def tracked_train(*args):  # the backend's step arguments, handed back to it unread
        context.clear()
        context.update(step_state(model, args, every_n_steps, metric))
        context["chosen"] = mode["chosen"]
        return wrapped_train(*args)

    def train_step(*args):
        return plain_train(*args) if mode["plain"] else tracked_train(*args)

    train_step._gradkit = metric
    make = make_train_function_of(model, metric, plain_train, tracked_train, every_n_steps, mode)
    return train_step, test_step, make


def track_gradient_norm(model, per_layer=False, include=("norm",), every_n_steps=1):
    """Makes `model`'s training step log `grad_norm` and the other diagnostics of `include`.

    The keys, their definitions and the semantics of the logged values are in the `gradkit.monitor`
    docstring. Idempotent: calling it again with the same arguments changes nothing; with others the
    metric is replaced. Survives `compile()` (the step functions are rebuilt on the next `fit`). The
    layers of the per-layer values are fixed now: track again after changing which layers are
    trainable.

    Args:
        model: a `keras.Model`; built when `per_layer=True` (call it on data, or give it an Input).
        per_layer: also log `"<key>/<layer name>"` for each top-level layer with trainable weights.
            Defaults to False.
        include: a group name or a list of them among "norm" (`grad_norm`), "clipped"
            (`grad_norm_clipped`, `clip_fraction`), "params" (`param_norm`), "updates" (`update_norm`,
            `update_ratio`), "health" (`grad_max`, `grad_nonfinite`, `grad_zero_fraction`), "noise_scale"
            (`noise_scale`, B_simple; one more pass over half of each recorded batch), or "all".
            Defaults to ("norm",).
        every_n_steps: int >= 1, record the values of every n-th applied update only (the first, the
            (n+1)-th, ...; counted by the optimizer's iterations, across `fit` calls); the other steps
            run the class's own training step (with `steps_per_execution` > 1 or a
            `LossScaleOptimizer`, they skip the computation in a traced conditional). Defaults to 1.

    Returns:
        The model.

    Raises:
        TypeError: `model` is not a `keras.Model`; `per_layer` is not a bool; `include` is not a
            string or a list of strings; `every_n_steps` is not an int.
        ValueError: `per_layer=True` on an unbuilt model or on one without a trainable layer; an
            unknown group in `include`; `every_n_steps < 1`; (at the first training step, before any
            update) "noise_scale" with a batch of one row. On JAX, Keras' `fit` then leaves the
            model's variables in its step state: build the model anew.

    Example:
        >>> gradkit.track_gradient_norm(model, include=("norm", "updates"))     # doctest: +SKIP
        >>> logs = model.train_on_batch(x, y, return_dict=True)                 # doctest: +SKIP
        >>> logs["grad_norm"], logs["update_ratio"]                             # doctest: +SKIP
        (0.8314, 0.0012)
    """
    check_model(model)
    per_layer = _checks.check_flag(per_layer, "per_layer")
    groups, every_n_steps = check_include(include), check_every_n_steps(every_n_steps)
    return install(model, per_layer, groups, every_n_steps)


def install(model, per_layer, groups, every_n_steps, histograms=False):
    """`track_gradient_norm` on checked arguments; `histograms`: also capture per-layer gradient
    histograms (`_histograms`, for `GradientNormCallback(histogram_freq=...)`)."""
    if per_layer and not model.built:
        expected = "a built model when per_layer=True (call it on a batch or start it with keras.Input)"
        _checks.fail("model", expected, model)
    layers = norm_layers(model) if per_layer else []
    if per_layer and not layers:
        _checks.fail("per_layer", "False for a model without a trainable top-level layer", per_layer)
    names = log_names(groups, [layer.name for layer in layers])
    if histograms and not model.built:
        _checks.fail("model", "a built model when histogram_freq > 0 (call it on a batch first)", model)
    if histograms and not norm_layers(model):
        _checks.fail("histogram_freq", "0 for a model without a trainable top-level layer", histograms)
    config = {"per_layer": per_layer, "include": groups, "every_n_steps": every_n_steps}
    config["histograms"] = bool(histograms)
    metric = tracked_metric(model)
    installed = getattr(vars(model).get("train_step"), "_gradkit", None)
    if metric is not None and installed is metric and metric.config == config:
        return model
    untrack_gradient_norm(model)
    hist_size = _histograms.size(len(norm_layers(model))) - 1 if histograms else 0  # the table
    metric = GradientNormMetric(names, noise_slots=noise_slots(names), hist_size=hist_size)
    object.__setattr__(metric, "config", config)  # not a tracked attribute
    _keras_internals.set_tracked_attribute(model, _ATTR, metric)
    model.train_step, model.test_step, model.make_train_function = _make_steps(
        model, metric, layers, groups, every_n_steps
    )
    model.train_function = None
    model.test_function = None
    return model
