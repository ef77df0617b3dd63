"""Certified lower bounds: what no attack inside the eps-ball can change.

`certify(model, x, y, eps, norm, method)` bounds the margins z_y - z_j of a classifier over the ball by
interval bound propagation (`ibp`) or CROWN's backward linear relaxation (`crown`); `output_bounds`
bounds the logits themselves. The layers they take are listed in `_graph` (Dense, Conv1D/2D,
BatchNormalization, monotone activations, pooling, Flatten, Reshape, Add, Rescaling, Normalization,
Dropout, a final softmax); any other is refused by name before any work.
"""

from gradkit.certificates._api import Certificate
from gradkit.certificates._api import certify
from gradkit.certificates._api import output_bounds

__all__ = [
    "Certificate",
    "certify",
    "output_bounds",
]
