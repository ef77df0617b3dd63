"""Exceptions raised by gradkit."""


class DisconnectedGradientError(ValueError):
    """The loss does not depend on the tensor it is differentiated with respect to.

    Raised instead of returning a gradient of zeros or `None`, typically when the loss goes through a
    non-differentiable step such as `argmax`, `round` or a comparison.
    """


class WorseThanRandomError(ValueError):
    """The first learner of a boosting `fit` is no better than random guessing (weighted error >= 1/2
    for AdaBoost.M1, >= 1 - 1/K for SAMME), so no ensemble can be built.

    A `ValueError`, as in scikit-learn's AdaBoost; its own class so that a caller (`gradkit study`) can
    tell it from bad input. The message names the error, the limit and the usual causes.
    """


class OutOfMemoryError(MemoryError):
    """The device ran out of memory inside an attack or evaluation step (TensorFlow's
    `ResourceExhaustedError`, PyTorch's `OutOfMemoryError`, JAX's `RESOURCE_EXHAUSTED`).

    A `MemoryError` whose message names the rows of the failing call and `batch_size`, the argument
    that bounds them; the backend's own exception is its `__cause__`.
    """


class StateMismatchError(ValueError):
    """A saved evaluation state (`gradkit.evaluate(state_path=...)`, `gradkit evaluate`'s state in
    `--out`) that this evaluation cannot resume from: it holds another evaluation (other model weights,
    data or settings), or it is unreadable, or one of its arrays is missing or altered.

    A `ValueError` whose message names the parameter; its own class so that a caller (`gradkit evaluate`)
    can name its own flags. Attributes: `path` (the state file), `why` (what is wrong, in words) and
    `changed` (the fingerprint keys that differ: "eps", "seed", "model", ...; [] when unreadable).
    """

    def __init__(self, message, path, why, changed):
        super().__init__(message)
        self.path, self.why, self.changed = path, why, changed
