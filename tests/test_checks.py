"""The argument checks (`gradkit._checks`): one message form, each caller's set of norms."""

import numpy as np
import pytest

from gradkit import _checks


def test_check_norm_takes_the_callers_set():
    assert _checks.check_norm("L1", allowed=_checks.GRADIENT_NORMS) == 1.0
    assert _checks.check_norm(0, allowed=(0, 1, 2, np.inf)) == 0.0
    with pytest.raises(ValueError, match=r"`norm` must be np.inf .* or 2 \(or \"l2\"\). Received: norm=1"):
        _checks.check_norm(1)
    with pytest.raises(ValueError, match=r'or 1 \(or "l1"\). Received: norm=3'):
        _checks.check_norm(3, allowed=_checks.GRADIENT_NORMS)
