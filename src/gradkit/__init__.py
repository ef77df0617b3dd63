"""gradkit: compiled loss gradients for Keras 3 classifiers on TensorFlow, JAX and PyTorch."""

from gradkit.ensemble import WeightedEnsemble
from gradkit.errors import DisconnectedGradientError
from gradkit.gradients import InputGradient, WeightGradient, input_gradient, weight_gradients

__version__ = "0.1.0"

__all__ = [
    "DisconnectedGradientError",
    "InputGradient",
    "WeightGradient",
    "WeightedEnsemble",
    "input_gradient",
    "weight_gradients",
]
