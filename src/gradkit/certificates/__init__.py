"""Certified robustness: lower bounds beside the attacks' upper bounds.

Public:
- `certify(model, x, y, eps, norm, method)` bounds the margins z_y - z_j of a classifier over the
  eps-ball by interval bound propagation (`ibp`) or CROWN's backward linear relaxation (`crown`);
  `output_bounds` bounds the logits themselves. The layers they take are listed in `_graph` (Dense,
  Conv1D/2D, BatchNormalization, monotone activations, pooling, Flatten, Reshape, Add, Rescaling,
  Normalization, Dropout, a final softmax); any other is refused by name before any work.
- `smooth(model, sigma)` and its `SmoothedClassifier` (randomized smoothing, Cohen et al. 2019, L2 radii).
- `vote_certificate` (a weighted hard vote certified from its members' certificates), `member_weights`.
"""

from gradkit.certificates._api import METHODS
from gradkit.certificates._api import Certificate
from gradkit.certificates._api import certify
from gradkit.certificates._api import output_bounds
from gradkit.certificates.smoothing import SmoothedClassifier
from gradkit.certificates.smoothing import smooth
from gradkit.certificates.vote import VoteCertificate
from gradkit.certificates.vote import member_weights
from gradkit.certificates.vote import vote_certificate

__all__ = [
    "METHODS",
    "Certificate",
    "SmoothedClassifier",
    "VoteCertificate",
    "certify",
    "member_weights",
    "output_bounds",
    "smooth",
    "vote_certificate",
]
