"""Recorded steps chosen on the host: the steps that record nothing run the class's own training step.

With `every_n_steps > 1` (or gradient accumulation) most steps record nothing. A traced conditional
inside one compiled step still costs those steps something: on JAX the weights before the update are
copied every step because they feed the conditional (the step updates its donated buffers in place), on
TensorFlow they are read (copy on write) and the optimizer's counter with them. So where the host
knows the index of every step, `fit` gets two training functions, both built by Keras' own
`make_train_function`: one from the class's `train_step` (`backend.plain_train_step`), run on the
steps that record nothing, and one from the tracked step, run on the recorded ones (which then records
without a conditional). `ChosenTrainFunction` picks one per call.

The host knows the index where each call of the training function runs one step that advances the
optimizer's counter by one: `steps_per_execution=1` (with more, the steps of a call run inside one
traced loop on TensorFlow), and no optimizer wrapper (a `LossScaleOptimizer` does not advance the
counter on the steps it skips for overflow). Elsewhere the tracked step runs every step, with the
traced conditional (`_tracking`). The counter starts from the optimizer's `iterations` each time
`make_train_function` is called (at the start of each `fit` and each `train_on_batch`), and counts the
calls that returned; the step records where `_step_state.sampled` holds, as the traced conditional
would decide.
"""

import keras

from gradkit import _keras_internals
from gradkit.monitor._step_state import inner_optimizer, sampled


def host_chooses(model, every_n_steps):
    """Whether some steps record nothing (`every_n_steps > 1`, or gradient accumulation) and the host
    knows the optimizer step of every call of `model`'s training function."""
    optimizer = model.optimizer
    if every_n_steps == 1 and not getattr(inner_optimizer(optimizer), "gradient_accumulation_steps", None):
        return False
    wrapped = getattr(optimizer, "inner_optimizer", None) is not None  # may skip steps (loss scaling)
    return getattr(model, "steps_per_execution", 1) == 1 and not wrapped


class ChosenTrainFunction:
    """`model.train_function` that runs `tracked` on the recorded steps, `plain` on the others.

    Args:
        plain: the training function Keras built from the class's step.
        tracked: the one built from the tracked step.
        every_n_steps: int >= 1, record every n-th applied update.
        steps: the optimizer's `gradient_accumulation_steps` (None: none).
        mode: dict whose "plain" entry is set before each call (PyTorch's functions look the step up
            at call time: the tracked step reads it).

    Attributes:
        iteration: int, the optimizer's counter before the next call.
    """

    def __init__(self, plain, tracked, every_n_steps, steps, mode):
        self.plain, self.tracked, self.mode = plain, tracked, mode
        self.every_n_steps, self.steps, self.iteration = every_n_steps, steps, 0

    def restart(self, optimizer):
        """Reads the optimizer's counter (once per `fit` or `train_on_batch`)."""
        counter = _keras_internals.optimizer_iterations(inner_optimizer(optimizer))
        self.iteration = int(keras.ops.convert_to_numpy(counter.value))

    def __call__(self, *args):
        recorded = bool(sampled(self.iteration, self.steps, self.every_n_steps))
        self.mode["plain"] = not recorded
        try:
            result = (self.tracked if recorded else self.plain)(*args)
        finally:
            self.mode["plain"] = False
        self.iteration += 1  # only once the step ran (an exhausted iterator raises before)
        return result


def make_train_function_of(model, plain_step, tracked_step, every_n_steps, mode):
    """The `make_train_function(force=False)` to install on `model`: Keras' own, run once per step
    function; `mode["chosen"]` tells the tracked step whether it runs only on recorded steps."""
    step_cls = type(model)

    def make_train_function(force=False):
        function = model.train_function
        if function is not None and not force:
            if isinstance(function, ChosenTrainFunction):
                function.restart(model.optimizer)
            return function
        mode["chosen"], mode["plain"] = host_chooses(model, every_n_steps), False
        installed = vars(model)["train_step"]
        if not mode["chosen"]:
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
        steps = getattr(inner_optimizer(model.optimizer), "gradient_accumulation_steps", None)
        model.train_function = ChosenTrainFunction(*built, every_n_steps, steps, mode)
        model.train_function.restart(model.optimizer)
        return model.train_function

    return make_train_function
