"""The numpy reference of the Square Attack (`oracles.square`) on a linear softmax model whose margin loss
is written here."""

import numpy as np
import pytest

from gradkit.attacks.square import as_image, eta, p_schedule
from oracles.square import square_core

SHAPE, C = (8, 8, 2), 4
D = int(np.prod(SHAPE))
RNG = np.random.default_rng(1)
W = RNG.normal(size=(D, C))
B = RNG.normal(size=C) * 0.1
X0 = RNG.uniform(0.2, 0.8, size=(30,) + SHAPE).astype(np.float32)
EPS = {np.inf: 0.015, 2: 0.15}


def logits(x):
    return x.reshape(len(x), -1).astype(np.float64) @ W + B


def labels_of(x):
    return logits(x).argmax(axis=1)


def margin_forward(x, labels, targets=None):
    """Untargeted: max_{j != y} z_j - z_y; targeted: z_t - max_{j != t} z_j (both maximized)."""
    z = logits(x)
    rows = np.arange(len(z))
    cls = labels if targets is None else targets
    others = z.copy()
    others[rows, cls] = -np.inf
    margin = others.max(axis=1) - z[rows, cls]
    return (margin if targets is None else -margin), z.argmax(axis=1)


def distance(a, b, norm):
    d = (a - b).reshape(len(a), -1).astype(np.float64)
    return np.abs(d).max(axis=1) if norm == np.inf else np.sqrt((d**2).sum(axis=1))


def min_eps(x0, labels, norm):
    """The smallest perturbation (box ignored) that flips the linear model away from `labels`."""
    z = logits(x0)
    dual = 1 if norm == np.inf else 2
    out = np.full(len(x0), np.inf)
    for j in range(C):
        gap = z[np.arange(len(z)), labels] - z[:, j]
        size = np.linalg.norm(W[:, labels] - W[:, [j]], ord=dual, axis=0)
        out = np.where(j == labels, out, np.minimum(out, gap / np.maximum(size, 1e-12)))
    return out


def attack(norm, x0=X0, n_queries=300, eps=None, forward=margin_forward, **kw):
    eps = EPS[norm] if eps is None else eps
    kw.setdefault("clip_values", (0.0, 1.0))
    return square_core(forward, x0, labels_of(x0), eps=eps, norm=norm, n_queries=n_queries, p_init=0.3,
                       rng=0, **kw)  # fmt: skip


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_breaks_small_margins_and_stays_in_ball_and_box(norm):
    x, success, used = attack(norm)
    assert x.dtype == np.float32 and x.shape == X0.shape and used.dtype == np.int64
    assert np.all(distance(x, X0, norm) <= EPS[norm] + 1e-6)
    assert x.min() >= 0.0 and x.max() <= 1.0
    assert np.array_equal(labels_of(x) != labels_of(X0), success)
    easy = min_eps(X0, labels_of(X0), norm) < EPS[norm] / 3
    assert easy.any() and success[easy].all() and not success.all()
    assert np.all(used[success] < 300) and np.all(used[~success] == 300)


def owners(x, norm):
    """The clean sample each queried row belongs to (the nearest one: the points lie far apart)."""
    rows = [np.argmin(distance(np.repeat(row[None], len(X0), axis=0), X0, norm)) for row in x]
    return np.array(rows, dtype=int)


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_succeeded_samples_are_no_longer_queried(norm):
    per_sample, last_hit = np.zeros(len(X0), int), np.full(len(X0), -1)

    def counting(x, labels, targets):
        owner = owners(x, norm)
        values, pred = margin_forward(x, labels, targets)
        np.add.at(per_sample, owner, 1)
        last_hit[owner] = pred != labels
        return values, pred

    _, success, used = attack(norm, forward=counting)
    np.testing.assert_array_equal(per_sample, used)
    np.testing.assert_array_equal(last_hit.astype(bool), success)


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_eps_zero_and_seeded_repeat(norm):
    x, success, _ = attack(norm, eps=0.0, n_queries=20)
    np.testing.assert_array_equal(x, X0)
    assert not success.any()
    first, second = attack(norm, n_queries=50), attack(norm, n_queries=50)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("norm", [np.inf, 2])
@pytest.mark.parametrize("shape", [(64,), (7,), (8, 8), (2, 4, 4, 2)])
def test_other_shapes(norm, shape):
    global W
    saved, n = W, int(np.prod(shape))
    W = np.random.default_rng(2).normal(size=(n, C))
    try:
        x0 = np.random.default_rng(3).uniform(0.2, 0.8, size=(10,) + shape).astype(np.float32)
        x, success, used = attack(norm, x0=x0, n_queries=100, eps=4 * EPS[norm])
        assert x.shape == x0.shape and np.all(distance(x, x0, norm) <= 4 * EPS[norm] + 1e-6)
        assert x.min() >= 0.0 and x.max() <= 1.0 and success.any()
    finally:
        W = saved


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_targeted_moves_predictions_to_the_target(norm):
    labels = labels_of(X0)
    targets = (labels + 1) % C
    eps = 2.5 if norm == 2 else 0.15
    x, success, _ = attack(norm, n_queries=500, eps=eps, targets=targets)
    assert success.mean() >= 0.5
    np.testing.assert_array_equal(labels_of(x)[success], targets[success])


def test_p_schedule_and_patterns():
    schedule = [p_schedule(0.8, i, 10000) for i in (0, 10, 11, 50, 51, 9000)]
    assert schedule == [0.8, 0.8, 0.4, 0.4, 0.2, 0.8 / 512]
    assert p_schedule(0.8, 2, 1000) == 0.4  # rescaled to the budget, as in the authors' code
    for a, b in [(5, 5), (3, 7), (1, 4), (6, 2)]:
        pattern = eta(a, b)
        assert pattern.shape == (a, b) and np.isclose(np.linalg.norm(pattern), 1.0)
    assert as_image(np.zeros((2, 64))).shape == (2, 8, 8, 1)
    assert as_image(np.zeros((2, 7))).shape == (2, 1, 7, 1)
    assert as_image(np.zeros((2, 3, 4, 5, 6))).shape == (2, 3, 4, 30)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="n_queries"):
        attack(np.inf, n_queries=0)
    with pytest.raises(ValueError, match="p_init"):
        square_core(margin_forward, X0, labels_of(X0), eps=0.1, norm=2, n_queries=5, p_init=0.0,
                    clip_values=None, rng=0)  # fmt: skip


@pytest.mark.parametrize("channels", [1, 3])
def test_linf_proposal_changes_one_window_of_the_x0_plus_minus_eps_corners(channels):
    """Linf proposals: each sample's candidate differs from its best point in one window at most, sets
    it to `x0 +- eps` (one sign per channel, clipped), and is redrawn (up to 8 draws) while it would
    not change: with one-pixel windows already at `x0 + eps`, 1 - 2^-8 of them change per channel."""
    from oracles.square import linf_proposal

    rng, n = np.random.default_rng(0), 2000
    x0 = rng.uniform(0.2, 0.8, size=(n, 6, 6, channels)).astype(np.float32)
    best = x0 + np.float32(0.1)  # every pixel at its + corner
    cand = linf_proposal(best, x0, 0.1, 1e-3, rng, (0.0, 1.0))  # p tiny: 1x1 windows
    changed = np.abs(cand - best).max(axis=3) > 1e-7  # (n, 6, 6)
    assert changed.reshape(n, -1).sum(axis=1).max() == 1  # one pixel at most
    assert changed.any(axis=(1, 2)).mean() > 0.97  # redrawn until it changes (each draw: 1 - 2^-c)
    np.testing.assert_allclose(np.abs(cand - x0), 0.1, atol=1e-6)  # every pixel on a corner
    wide = linf_proposal(best, x0, 0.1, 0.5, rng, (0.0, 1.0))  # 4x4 windows (p * 36 = 18 -> side 4)
    assert (np.abs(wide - best).max(axis=3) > 1e-7).reshape(n, -1).sum(axis=1).max() <= 16
