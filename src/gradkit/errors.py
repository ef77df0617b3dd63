"""Exceptions raised by gradkit."""


class DisconnectedGradientError(ValueError):
    """The loss does not depend on the tensor it is differentiated with respect to.

    Raised instead of returning a gradient of zeros or `None`, typically when the loss goes through a
    non-differentiable step such as `argmax`, `round` or a comparison.
    """
