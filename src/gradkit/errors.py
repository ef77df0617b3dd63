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
