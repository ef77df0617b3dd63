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


def test_per_feature_bounds_and_masks_broadcast_to_one_input():
    assert _checks.check_clip((0, 1)) == (0.0, 1.0)  # scalars: as check_clip_values
    lo, hi = _checks.check_clip(([0.0, 0.5], 1))
    assert lo.dtype == np.float32 and hi.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="`clip_values` must be a pair \\(lo, hi\\) of finite arrays"):
        _checks.check_clip(([0.0, 2.0], [1.0, 1.0]))  # lo > hi in one feature
    with pytest.raises(ValueError, match="`mask` must be None or an array of 0 and 1"):
        _checks.check_mask([0, 2])
    x = np.zeros((3, 2, 2), np.float32)
    (lo, hi), mask = _checks.broadcast_box(([0.0, -1.0], 1.0), _checks.check_mask([1, 0]), x)
    assert lo.shape == hi.shape == mask.shape == (1, 2, 2)
    assert lo[0, :, 1].tolist() == [-1.0, -1.0] and mask[0, :, 0].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match=r"`mask` must broadcast to one input's shape \(2, 2\)"):
        _checks.broadcast_box(None, np.ones(3, np.float32), x)
