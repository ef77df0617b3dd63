"""`track_gradient_norm` / `untrack_gradient_norm`: the model's training step hands its gradients to a metric.

The steps are wrapped by `gradkit.backend.wrap_train_step` (which knows each backend's step); this module
chooses what is recorded: the norms of the gradients, or under gradient accumulation those of the
applied update. The semantics of the logged value are in the `gradkit.monitor` docstring.
"""

from gradkit import _checks, _keras_internals, backend
from gradkit.gradients import check_model
from gradkit.monitor._gradient_norm import layer_groups, norm_layers, result_names
from gradkit.monitor._step_norms import GradientNormMetric, NormValues

_ATTR = "_gradkit_grad_norm"


def inner_optimizer(optimizer):
    """The optimizer that applies the update (inside a `LossScaleOptimizer`, the wrapped one)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


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
    for name in ("train_step", "test_step"):
        vars(model).pop(name, None)
    model.train_function = None
    model.test_function = None
    return model


def _accumulation_state(model, args):
    """Before a step, what the norm of an accumulated update needs: {steps, acc, iteration}, or {}."""
    optimizer = inner_optimizer(model.optimizer)
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if not steps:
        return {}
    state = {"steps": steps, "acc": None, "iteration": 0}  # unbuilt optimizer: nothing accumulated yet
    accumulators = _keras_internals.accumulated_gradients(optimizer)
    if accumulators and len(accumulators) == len(model.trainable_variables):
        iterations = _keras_internals.optimizer_iterations(optimizer)
        *acc, iteration = backend.values_before_step(model, args, [*accumulators, iterations])
        state.update(acc=acc, iteration=iteration)
    return state


def _accumulated_norms(values_of, grads, scale, context):
    """The norms of an accumulated update: zeros on the steps that only accumulate.

    The applied gradient is the mean of the `steps` accumulated ones (read before the step into
    `context`), and only the step that applies it counts.
    """
    n, acc = context["steps"], context["acc"] or [None] * len(grads)
    if scale is not None:
        grads = [g if g is None else g / scale for g in grads]
    grads = [g if g is None else (g + (0.0 if a is None else a)) / n for g, a in zip(grads, acc)]
    return backend.applied_norms(values_of(grads), context["iteration"], n)


def _make_steps(model, metric, layers):
    """The wrapped train/test steps; the train step first reads the state an accumulated update needs."""
    context, cache = {}, {}

    def norms_fn(grads, scale):
        if len(grads) not in cache:  # built at trace time (TF, JAX); once per model state (torch)
            cache.clear()
            cache[len(grads)] = NormValues(layer_groups(model, layers))
        values_of = cache[len(grads)]
        if not context.get("steps"):
            return values_of(grads, scale)
        return _accumulated_norms(values_of, grads, scale, context)

    wrapped_train, test_step = backend.wrap_train_step(model, metric, norms_fn)

    def train_step(*args):  # the backend's step arguments, handed back to it unread
        context.clear()
        context.update(_accumulation_state(model, args))
        return wrapped_train(*args)

    train_step._gradkit = metric
    return train_step, test_step


def track_gradient_norm(model, per_layer=False):
    """Makes `model`'s training step log `grad_norm` (semantics in the `gradkit.monitor` docstring).

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
    check_model(model)
    per_layer = _checks.check_flag(per_layer, "per_layer")
    if per_layer and not model.built:
        expected = "a built model when per_layer=True (call it on a batch or start it with keras.Input)"
        _checks.fail("model", expected, model)
    layers = norm_layers(model) if per_layer else []
    names = result_names(layers)
    metric = tracked_metric(model)
    installed = getattr(vars(model).get("train_step"), "_gradkit", None)
    if metric is not None and installed is metric and metric.names == names:
        return model
    untrack_gradient_norm(model)
    metric = GradientNormMetric(names)
    _keras_internals.set_tracked_attribute(model, _ATTR, metric)
    model.train_step, model.test_step = _make_steps(model, metric, layers)
    model.train_function = None
    model.test_function = None
    return model
