"""What a tracked training step reads before it runs: whether it is recorded (`sampled`), the state of
an accumulated update, the iteration to capture a histogram from (`step_state`), and the gradient of
an accumulated update (`applied_gradients`)."""

from gradkit import _keras_internals, backend


def inner_optimizer(optimizer):
    """The optimizer that applies the update (inside a `LossScaleOptimizer`, the wrapped one)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def step_state(model, args, every_n_steps, metric):
    """Before a step, what sampling, an accumulated update and histograms need: {steps, acc, iteration,
    hist_from}, or {}."""
    optimizer = inner_optimizer(model.optimizer)
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if not steps and every_n_steps == 1 and not metric.hist_size:
        return {}
    state = {"steps": steps, "acc": None, "iteration": 0}  # unbuilt optimizer: nothing accumulated yet
    accumulators = _keras_internals.accumulated_gradients(optimizer) if steps else None
    iterations = _keras_internals.optimizer_iterations(optimizer)
    if accumulators and len(accumulators) == len(model.trainable_variables):
        *acc, iteration = backend.values_before_step(model, args, [*accumulators, iterations])
        state.update(acc=acc, iteration=iteration)
    elif optimizer.built or not backend.ITERATIONS_IN_STATE_ONCE_BUILT:
        # The counter exists before the optimizer is built (JAX's step state holds it only once it is);
        # a traced step must read it, not fix it at 0.
        (state["iteration"],) = backend.values_before_step(model, args, [iterations])
    if metric.hist_size:
        (state["hist_from"],) = backend.metric_values_before_step(model, args, [metric.hist_from])
    if backend.STEPS_RUN_EAGERLY:  # the host decides whether the step is sampled
        state["iteration"] = int(state["iteration"])
        state["hist_from"] = float(state.get("hist_from", "inf"))
    return state


def sampled(iteration, steps, every_n_steps):
    """Whether the step after `iteration` optimizer iterations is recorded (int or integer tensor in,
    bool or boolean tensor out): it applies an update (every `steps`-th step under gradient
    accumulation, else every step) whose index among the updates is a multiple of `every_n_steps`."""
    steps = steps or 1
    return ((iteration + 1) % steps == 0) & (((iteration + 1) // steps - 1) % every_n_steps == 0)


def applied_gradients(grads, scale, context):
    """The gradient of an accumulated update: the mean of the `steps` accumulated ones (read before the
    step into `context`) and this step's, unscaled."""
    n, acc = context["steps"], context["acc"] or [None] * len(grads)
    if scale is not None:
        grads = [g if g is None else g / scale for g in grads]
    return [g if g is None else (g + (0.0 if a is None else a)) / n for g, a in zip(grads, acc)]
