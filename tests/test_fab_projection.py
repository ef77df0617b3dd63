"""FAB's box-constrained projection (`gradkit.attacks.fab.project`) against a plain per-row reference that
sorts the breakpoints and walks them (the textbook form of Croce & Hein 2020, Section 3), in float64:
boxes that reach the hyperplane and boxes that cannot, zero entries of `w`, ties, and the step's
contract (on the hyperplane where reachable, inside the box)."""

import numpy as np
import pytest

from gradkit import backend
from gradkit.attacks.fab import project


def _reference(t, w, c, norm, lo, hi):
    """The smallest `d` (Linf or L2) with `w . (t + d) = w . t - c` and `lo <= t + d <= hi`, row by row."""
    out = np.zeros_like(t, np.float64)
    for k in range(len(t)):
        sign = 1.0 if c[k] >= 0 else -1.0
        wk, ck = w[k].astype(np.float64) * sign, float(c[k]) * sign
        room = np.maximum(np.where(wk > 0, t[k] - lo, hi - t[k]), 0.0)
        aw = np.abs(wk)
        useful = aw > 0
        r = np.where(useful, room / (1.0 if norm == np.inf else np.where(useful, aw, 1.0)), np.inf)
        slope = aw if norm == np.inf else aw**2
        done, rate, lam = 0.0, slope[useful].sum(), 1e30
        for i in np.argsort(r, kind="stable"):
            if not useful[i]:
                break
            if rate > 0 and (ck - done) / rate <= r[i]:
                break
            done, rate = done + aw[i] * room[i], rate - slope[i]
        if rate > 1e-12:
            lam = (ck - done) / rate
        e = np.minimum(lam * (1.0 if norm == np.inf else aw), room)
        out[k] = np.where(useful, -np.sign(wk) * e, 0.0)
    return out


def _case(seed, scale):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 1, (64, 20)).astype("float32")
    t[:, :4], t[:, 4:8], t[:, 8:10] = 0.0, 1.0, 0.5  # at a bound, and ties
    w = rng.standard_normal((64, 20)).astype("float32")
    w[:, 10:12] = 0.0
    c = (scale * rng.standard_normal(64)).astype("float32")
    return t, w, c


@pytest.mark.parametrize("norm", [np.inf, 2.0])
@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0])  # mostly free, box-limited, mostly unreachable
def test_the_projection_matches_the_sorted_walk(norm, scale):
    t, w, c = _case(int(scale * 100), scale)
    lo, hi = backend.to_tensor(np.float32(0.0)), backend.to_tensor(np.float32(1.0))
    args = [backend.to_tensor(a) for a in (t, w, c)]
    d = backend.to_numpy(project(*args, norm, (lo, hi))).astype(np.float64)
    expected = _reference(t, w, c, norm, 0.0, 1.0)
    np.testing.assert_allclose(d, expected, rtol=1e-4, atol=1e-5)
    z = t + d
    assert z.min() >= -1e-6 and z.max() <= 1 + 1e-6
    # where the box holds enough room (moving every useful coordinate to its bound passes c), the
    # step lands on the hyperplane
    room = np.where(w * np.sign(c)[:, None] > 0, t, 1 - t)
    reachable = np.sum(np.abs(w) * room, axis=1) > 1.001 * np.abs(c)
    np.testing.assert_allclose(((w * d).sum(axis=1) + c)[reachable], 0.0, atol=1e-4)
    assert reachable.any()
