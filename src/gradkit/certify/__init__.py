"""Certified robustness: lower bounds beside the attacks' upper bounds.

Public: `smooth` and its `SmoothedClassifier` (randomized smoothing, Cohen et al. 2019, L2 radii), and
`vote_certificate` (a weighted hard vote certified from its members' certificates).
"""

from gradkit.certify.smoothing import SmoothedClassifier
from gradkit.certify.smoothing import smooth
from gradkit.certify.vote import VoteCertificate
from gradkit.certify.vote import member_weights
from gradkit.certify.vote import vote_certificate

__all__ = [
    "SmoothedClassifier",
    "VoteCertificate",
    "member_weights",
    "smooth",
    "vote_certificate",
]
