"""The numpy core of Auto-PGD on a linear softmax model whose losses and gradients are written here."""

import numpy as np
import pytest

from gradkit.attacks.apgd import checkpoints
from oracles.apgd import apgd_core

SHAPE, C = (6, 6, 2), 5
D = int(np.prod(SHAPE))
RNG = np.random.default_rng(0)
W = RNG.normal(size=(D, C)).astype(np.float64)
B = RNG.normal(size=C) * 0.1
X0 = RNG.uniform(0.1, 0.9, size=(40,) + SHAPE).astype(np.float32)
EPS = {np.inf: 0.03, 2: 0.25}


def logits(x):
    return x.reshape(len(x), -1).astype(np.float64) @ W + B


def labels_of(x):
    return logits(x).argmax(axis=1)


def ce_step(x, labels, targets=None):
    """Untargeted CE (targeted: minus the CE of the target), maximized; its gradient w.r.t. x."""
    z = logits(x)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    cls, sign = (labels, 1.0) if targets is None else (targets, -1.0)
    ce = -np.log(p[np.arange(len(z)), cls])
    dz = p.copy()
    dz[np.arange(len(z)), cls] -= 1.0
    grad = (sign * dz @ W.T).reshape(x.shape).astype(np.float32)
    return sign * ce, z.argmax(axis=1), grad


def dlr_step(x, labels, targets=None):
    """The untargeted DLR loss of Croce & Hein (2020) and its gradient."""
    z = logits(x)
    rows = np.arange(len(z))
    order = np.argsort(z, axis=1)
    others = z.copy()
    others[rows, labels] = -np.inf
    a = others.argmax(axis=1)
    num, den = z[rows, labels] - z[rows, a], z[rows, order[:, -1]] - z[rows, order[:, -3]] + 1e-12
    dz = np.zeros_like(z)
    np.add.at(dz, (rows, labels), -1.0 / den)
    np.add.at(dz, (rows, a), 1.0 / den)
    np.add.at(dz, (rows, order[:, -1]), num / den**2)
    np.add.at(dz, (rows, order[:, -3]), -num / den**2)
    return -num / den, z.argmax(axis=1), (dz @ W.T).reshape(x.shape).astype(np.float32)


def distance(a, b, norm):
    d = (a - b).reshape(len(a), -1).astype(np.float64)
    return np.abs(d).max(axis=1) if norm == np.inf else np.sqrt((d**2).sum(axis=1))


def run(step=ce_step, norm=np.inf, eps=None, steps=30, **kw):
    eps = EPS[norm] if eps is None else eps
    kw.setdefault("clip_values", (0.0, 1.0))
    return apgd_core(step, X0, labels_of(X0), eps=eps, norm=norm, steps=steps, rng=0, **kw)


@pytest.mark.parametrize("step", [ce_step, dlr_step], ids=["ce", "dlr"])
@pytest.mark.parametrize("norm", [np.inf, 2])
def test_stays_in_ball_and_box(step, norm):
    for eps in (EPS[norm], 4 * EPS[norm]):
        x, success, values, calls = run(step, norm, eps=eps)
        assert x.dtype == np.float32 and x.shape == X0.shape
        assert np.all(distance(x, X0, norm) <= eps + 1e-6)
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert np.array_equal(labels_of(x) != labels_of(X0), success)
        assert values.shape == (len(X0),) and 1 <= calls <= 31
    far = X0 + 10.0
    x, *_ = run(step, norm, x_init=far, clip_values=None)
    assert np.all(distance(x, X0, norm) <= EPS[norm] + 1e-6)


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_eps_zero_returns_x0(norm):
    x, success, _, _ = run(norm=norm, eps=0.0)
    np.testing.assert_array_equal(x, X0)
    assert not success.any()


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_seeded_run_repeats(norm):
    first, second = run(dlr_step, norm), run(dlr_step, norm)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def pgd(x0, labels, eps, norm, steps):
    """Plain PGD from x0, step eps/4: the highest CE per sample and whether any iterate broke it."""
    x, best, broken = x0.copy(), np.full(len(x0), -np.inf), np.zeros(len(x0), bool)
    for _ in range(steps + 1):
        values, pred, g = ce_step(x, labels)
        best, broken = np.maximum(best, values), broken | (pred != labels)
        g = g.reshape(len(g), -1)
        unit = np.sign(g) if norm == np.inf else g / np.linalg.norm(g, axis=1, keepdims=True)
        delta = (x - x0).reshape(len(x), -1) + eps / 4 * unit
        if norm == np.inf:
            delta = np.clip(delta, -eps, eps)
        else:
            delta *= np.minimum(1.0, eps / np.linalg.norm(delta, axis=1, keepdims=True))
        x = np.clip(x0 + delta.reshape(x0.shape), 0, 1).astype(np.float32)
    return best, broken


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_apgd_at_least_as_strong_as_pgd(norm):
    labels = labels_of(X0)
    _, success, values, calls = run(norm=norm, steps=100, early_stop=False)
    pgd_best, pgd_broken = pgd(X0, labels, EPS[norm], norm, 100)
    assert calls == 101
    assert np.mean(values >= pgd_best - 1e-6) >= 0.9
    assert success.sum() >= pgd_broken.sum() and 0 < success.sum() < len(X0)


def test_early_stop_spends_fewer_rows():
    rows = []

    def counting(x, labels, targets):
        rows.append(len(x))
        return ce_step(x, labels, targets)

    _, success, _, calls = apgd_core(
        counting, X0, labels_of(X0), eps=0.03, norm=np.inf, steps=30, clip_values=(0, 1), rng=0
    )
    assert success.any() and calls == len(rows) and rows[0] == len(X0)
    assert rows[-1] == len(X0) - success.sum() and sum(rows) < len(X0) * calls


def test_first_success_is_kept():
    """The decision flips at iterate 1 and 3 (not at 0, 2, 4, ...); the objective keeps rising."""
    seen = []

    def step(x, labels, targets):
        k = len(seen)
        seen.append(x.copy())
        pred = labels + 1 if k in (1, 3) else labels
        return np.full(len(x), float(k)), pred, np.full_like(x, (-1.0) ** k)

    x0 = np.full((2, 3), 0.5, np.float32)
    x, success, values, calls = apgd_core(
        step, x0, np.array([0, 1]), eps=0.1, norm=np.inf, steps=6, clip_values=(0, 1), rng=0, early_stop=False
    )
    assert success.all() and calls == 7 and np.array_equal(values, [6.0, 6.0])
    np.testing.assert_array_equal(x, seen[1])
    assert not np.array_equal(seen[1], seen[3])


def test_never_successful_keeps_the_best_iterate():
    seen = []

    def step(x, labels, targets):
        seen.append(x.copy())
        return np.full(len(x), 5.0 if len(seen) == 3 else 0.0), labels, np.ones_like(x)

    x0 = np.full((1, 4), 0.5, np.float32)
    x, success, values, _ = apgd_core(step, x0, [0], eps=0.1, norm=2, steps=5, clip_values=None, rng=1)
    assert not success.any() and values[0] == 5.0
    np.testing.assert_array_equal(x, seen[2])


def test_checkpoints_are_the_papers():
    assert checkpoints(100) == [0, 22, 41, 57, 70, 80, 87, 93, 99]
    assert checkpoints(1000)[:4] == [0, 220, 410, 570]
    assert checkpoints(1) == [0, 1]


def moves_under(value_of_call, steps=100):
    """1-d APGD without momentum, eps=1, pulled back to 0 (gradient +1 below 0, -1 from 0 up).

    From 0 the iterates alternate between 0 and -eta (eta <= eps), so every move has length eta; at
    the start (eta = 2) they alternate between -1 and 1. Returns the iterates `(steps + 1,)`."""
    seen = []

    def step(x, labels, targets):
        seen.append(float(x[0, 0]))
        grad = np.where(x < 0, 1.0, -1.0).astype(np.float32)
        return np.array([value_of_call(len(seen) - 1)]), labels, grad

    x0 = np.zeros((1, 1), np.float32)
    apgd_core(step, x0, [0], eps=1.0, norm=np.inf, steps=steps, clip_values=None, rng=0,
              x_init=x0, momentum=1.0)  # fmt: skip
    return np.array(seen)


def check_moves(seen, halved):
    """The step size is 2, halved after each iterate in `halved`, where the run restarts at x^(0) = 0."""
    eta = [2.0 / 2 ** sum(k >= w for w in halved) for k in range(len(seen) - 1)]
    assert seen[1] == -1.0
    for k in range(1, len(seen) - 1):
        start = 0.0 if k in halved else seen[k]
        assert abs(seen[k + 1] - start) == min(eta[k], 1.0 + abs(start)), k


def test_step_halves_at_checkpoints_when_nothing_improves():
    check_moves(moves_under(lambda k: 0.0), checkpoints(100)[1:])


def test_no_halving_while_the_objective_rises():
    seen = moves_under(lambda k: float(k))
    np.testing.assert_array_equal(np.abs(np.diff(seen))[1:], np.full(99, 2.0))


def test_condition_two_fires_every_other_checkpoint():
    """Values rise after a first drop but never pass the start: only condition 2 holds (not at w_1)."""
    check_moves(moves_under(lambda k: 0.0 if k == 0 else -1000.0 + k), [41, 70, 87, 99])


def test_targeted_moves_predictions_to_the_target():
    labels = labels_of(X0)
    targets = (labels + 1) % C
    x, success, _, _ = apgd_core(
        ce_step, X0, labels, eps=0.3, norm=np.inf, steps=50, clip_values=(0, 1), rng=0, targets=targets
    )
    assert success.mean() >= 0.8
    np.testing.assert_array_equal(labels_of(x)[success], targets[success])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="norm"):
        run(norm=1, eps=0.1)
    with pytest.raises(ValueError, match="eps"):
        run(eps=-1.0)
    with pytest.raises(ValueError, match="rho"):
        run(rho=2.0)
