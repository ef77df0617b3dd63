"""Recorded steps chosen on the host: the steps that record nothing run the class's own training step.

With `every_n_steps > 1` (or gradient accumulation) most steps record nothing, and a traced conditional
inside one compiled step still costs them something (on JAX the weights before the update are copied
every step because they feed the conditional; on TensorFlow they are read, the optimizer's counter with
them). So where the host knows the index of every step (`how_to_count`), `fit` gets two training
functions, both built by Keras' own `make_train_function`: one from the class's `train_step`
(`backend.plain_train_step`) for the steps that record nothing, one from the tracked step for the
recorded ones (which then records without a conditional); `ChosenTrainFunction` picks one per call.
"""

import keras

from gradkit import _keras_internals, backend
from gradkit.monitor._step_state import inner_optimizer, sampled


def how_to_count(model, every_n_steps):
    """How the host knows the optimizer step of each call of `model`'s training function.

    - "count": each call runs one step that advances the optimizer's counter by one
      (`steps_per_execution=1`, and no optimizer wrapper: a `LossScaleOptimizer` leaves the counter
      alone on the steps it skips for overflow). The counter is read each time `make_train_function`
      is called (at the start of each `fit` and `train_on_batch`), then counted on the host: no read
      per step (a read would wait for JAX's queued steps).
    - "read": elsewhere on TensorFlow and PyTorch, whose calls return when their steps are done: the
      counter is read before each call. With `steps_per_execution=k` (TensorFlow) a call runs the
      tracked function, with its traced conditional, where any of its k steps may be recorded, and the
      plain one elsewhere.
    - None: no step needs it (`every_n_steps=1` without gradient accumulation records every step), or
      the host cannot know (JAX with a `LossScaleOptimizer` or `steps_per_execution` > 1: the tracked
      step runs every step, with the traced conditional of `_tracking`, recording where
      `_step_state.sampled` holds).

    On TensorFlow and JAX the plain step's graph is the untracked model's: the metric reports nothing
    there, and the host adds the last recorded step's values to its logs (`GradientNormMetric.keep`
    and `complete`).
    """
    optimizer = model.optimizer
    if every_n_steps == 1 and not getattr(inner_optimizer(optimizer), "gradient_accumulation_steps", None):
        return None
    wrapped = getattr(optimizer, "inner_optimizer", None) is not None  # may skip steps (loss scaling)
    if getattr(model, "steps_per_execution", 1) == 1 and not wrapped:
        return "count"
    return "read" if backend.COUNTER_READABLE_BETWEEN_CALLS else None


class ChosenTrainFunction:
    """`model.train_function` that runs `tracked` on the recorded steps, `plain` on the others.

    Args:
        plain: the training function Keras built from the class's step.
        tracked: the one built from the tracked step.
        metric: the `GradientNormMetric` that keeps a recorded step's logs and completes those of the
            plain step, where that step reports none of its keys (TensorFlow's, JAX's), else None.
        counter: the optimizer's counter variable (its `iterations` before accumulation).
        every_n_steps: int >= 1, record every n-th applied update.
        steps: the optimizer's `gradient_accumulation_steps` (None: none).
        mode: dict whose "plain" entry is set before each call (PyTorch's functions look the step up
            at call time: the tracked step reads it).
        read: read `counter` before each call, else count the calls. Defaults to False.
        span: the most steps one call runs (`steps_per_execution`). Defaults to 1.

    Attributes:
        iteration: int, the optimizer's counter before the next call.
    """

    def __init__(self, plain, tracked, metric, counter, every_n_steps, steps, mode, read=False, span=1):
        self.plain, self.tracked, self.metric, self.counter, self.mode = plain, tracked, metric, counter, mode
        self.every_n_steps, self.steps, self.read, self.span = every_n_steps, steps, read, span
        self.restart()

    def restart(self):
        """Reads the optimizer's counter (once per `fit` or `train_on_batch`, or before each call)."""
        self.iteration = int(keras.ops.convert_to_numpy(self.counter.value))

    def __call__(self, *args):
        if self.read:
            self.restart()
        n, steps, i = self.every_n_steps, self.steps, self.iteration
        recorded = any(bool(sampled(i + j, steps, n)) for j in range(self.span))
        self.mode["plain"] = not recorded
        try:
            result = (self.tracked if recorded else self.plain)(*args)
        finally:
            self.mode["plain"] = False
        self.iteration += 1  # only once the step ran (an exhausted iterator raises before)
        if self.metric is None:
            return result
        pair = isinstance(result, tuple)  # JAX's training functions return (logs, state)
        if recorded:
            self.metric.keep(result[0] if pair else result)
            return result
        return (self.metric.complete(result[0]), *result[1:]) if pair else self.metric.complete(result)


def make_train_function_of(model, metric, plain_step, tracked_step, every_n_steps, mode):
    """The `make_train_function(force=False)` to install on `model`: Keras' own, run once per step
    function; `mode["chosen"]` tells the tracked step whether it runs only on recorded steps."""
    step_cls = type(model)

    def make_train_function(force=False):
        function = model.train_function
        if function is not None and not force:
            if isinstance(function, ChosenTrainFunction):
                function.restart()
            return function
        how, mode["plain"] = how_to_count(model, every_n_steps), False
        span = int(getattr(model, "steps_per_execution", 1) or 1)
        mode["chosen"] = how is not None and span == 1  # the tracked step runs on recorded steps only
        installed = vars(model)["train_step"]
        if how is None:
            step_cls.make_train_function(model, force=True)
            return model.train_function
        built = []
        try:
            for step in (plain_step, tracked_step):
                # A new function object for each: JAX shares traces between jits of the same one.
                vars(model)["train_step"] = lambda *args, step=step: step(*args)
                step_cls.make_train_function(model, force=True)
                built.append(model.train_function)
        finally:
            vars(model)["train_step"] = installed
        keeper = metric if getattr(plain_step, "quiet", False) else None  # the plain logs lack its keys
        optimizer = inner_optimizer(model.optimizer)
        counter = _keras_internals.optimizer_iterations(optimizer)
        steps = getattr(optimizer, "gradient_accumulation_steps", None)
        model.train_function = ChosenTrainFunction(
            *built, keeper, counter, every_n_steps, steps, mode, read=how == "read", span=span
        )
        return model.train_function

    return make_train_function
