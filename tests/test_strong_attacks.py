"""gradkit.apgd and gradkit.square on real Keras models, on every backend: threat-model properties,
strength against PGD, one trace per run, the ensemble objectives, bad input."""

import sys

import keras
import numpy as np
import pytest
from sklearn.datasets import load_digits

import gradkit
from gradkit import backend
from gradkit.attacks import decide, run_attack
from gradkit.gradients._cache import cached_values


@pytest.fixture(scope="module")
def digits_mlp():
    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.data / 16.0).astype("float32"), d.target
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])  # fmt: skip
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.fit(x[:1200], y[:1200], epochs=15, batch_size=64, verbose=0)
    return model, x[1200:1400], y[1200:1400]


def accuracy(model, x, y):
    return float(np.mean(decide(model, x) == y))


@pytest.mark.parametrize("norm, eps", [(np.inf, 0.1), (2, 1.0)])
def test_apgd_and_square_stay_in_ball_and_box_and_repeat(digits_mlp, norm, eps):
    model, x, y = digits_mlp
    for attack in (
        lambda s: gradkit.apgd(model, x, y, eps=eps, norm=norm, steps=20, clip_values=(0, 1), seed=s),
        lambda s: gradkit.square(model, x, y, eps=eps, norm=norm, n_queries=50, clip_values=(0, 1), seed=s),
    ):
        adv = attack(0)
        delta = (adv - x).reshape(len(x), -1)
        size = np.abs(delta).max(axis=1) if norm == np.inf else np.linalg.norm(delta, axis=1)
        assert size.max() <= eps + 1e-5 and adv.min() >= 0 and adv.max() <= 1
        np.testing.assert_array_equal(attack(0), adv)
        assert accuracy(model, adv, y) < accuracy(model, x, y)
    np.testing.assert_array_equal(gradkit.apgd(model, x, y, eps=0.0), x)


def test_apgd_is_at_least_as_strong_as_pgd_and_traces_once(digits_mlp):
    model, x, y = digits_mlp
    pgd = gradkit.pgd(model, x, y, eps=0.1, eps_step=0.025, steps=10, clip_values=(0, 1), seed=0)
    ce = gradkit.apgd(model, x, y, eps=0.1, steps=50, clip_values=(0, 1), seed=0)
    dlr = gradkit.apgd(model, x, y, eps=0.1, steps=50, loss="dlr", clip_values=(0, 1), seed=0)
    t = gradkit.apgd(model, x, y, eps=0.1, steps=20, loss="dlr", targeted=True, n_target_classes=3,
                     clip_values=(0, 1), seed=0)  # fmt: skip
    clean, pgd_acc = accuracy(model, x, y), accuracy(model, pgd, y)
    assert min(accuracy(model, ce, y), accuracy(model, dlr, y)) <= pgd_acc  # DLR alone may trail CE
    assert accuracy(model, dlr, y) < clean - 0.3
    assert accuracy(model, t, y) < clean
    objectives = cached_values(model, "attack")
    # with and without gradient; where a new shape is cheap (PyTorch), rows are padded only to a
    # multiple of ROW_QUANTUM: one trace per such row count at most (APGD-T's 3 targets run together)
    # The attacks' compiled steps (the engine: one per attack and norm, see `AttackGradient.step_function`)
    # each trace once per row count in the same way.
    quantum = backend.ROW_QUANTUM
    shapes = 1 if quantum is None else -(-3 * len(x) // quantum)
    assert objectives and all(f._fn.trace_count + f._forward_fn.trace_count <= 2 * shapes for f in objectives)
    assert all(s.trace_count <= shapes for f in objectives for s in getattr(f._fn, "steps", {}).values())


def test_run_attack_reports_success_on_the_real_decision_and_costs(digits_mlp):
    model, x, y = digits_mlp
    result = run_attack("apgd-ce", model, x, y, eps=0.1, clip_values=(0, 1), seed=0, steps=10)
    np.testing.assert_array_equal(result.success, decide(model, result.x_adv) != y)
    assert 0 < result.n_gradients <= len(x) * 11 + len(x) and result.zero_gradient.shape == (len(x),)
    assert not result.from_probabilities  # the softmax was removed: logits
    square = run_attack("square", model, x, y, eps=0.1, clip_values=(0, 1), seed=0, n_queries=20)
    assert square.n_gradients == 0 and len(x) <= square.n_forwards <= 20 * len(x) + 1


def test_ensemble_objectives_all_attack_the_vote(digits_mlp):
    model, x, y = digits_mlp
    other = keras.models.clone_model(model)
    other.set_weights([w * 0.9 for w in model.get_weights()])
    ens = gradkit.WeightedEnsemble([model, other], [0.6, 0.4])
    clean = accuracy(ens, x, y)
    for objective in ("loss_sum", "logit_mean", "prob_mean", "vote_margin"):
        adv = gradkit.apgd(ens, x, y, eps=0.1, steps=20, clip_values=(0, 1), seed=0, objective=objective)
        assert accuracy(ens, adv, y) < clean - 0.1, objective


def test_vote_margin_follows_a_vote_that_the_loss_sum_cannot_see():
    # Weights 0.6 / 0.4: the first member alone decides the hard vote (class 1 iff x0 > 0.5). The second
    # (z1 = 30 - 50 x0) is saturated on class 1, yet its cross-entropy gradient is 50x larger and points
    # the other way, so the loss_sum steps move x0 down and never change the vote; the margin of the
    # smoothed vote follows the deciding member and flips the vote.
    inp = keras.Input((2,))
    deciding = keras.Model(inp, keras.layers.Dense(2)(inp))
    deciding.set_weights([np.array([[0.0, 1.0], [0.0, 0.0]], "float32"), np.array([0.0, -0.5], "float32")])
    loud = keras.Model(inp, keras.layers.Dense(2)(inp))
    loud.set_weights([np.array([[0.0, -50.0], [0.0, 0.0]], "float32"), np.array([0.0, 30.0], "float32")])
    for member in (deciding, loud):
        member.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ens = gradkit.WeightedEnsemble([deciding, loud], [0.6, 0.4])
    x, y = np.array([[0.45, 0.5]], "float32"), np.array([0])
    assert decide(ens, x)[0] == 0
    kw = dict(eps=0.1, eps_step=0.05, steps=4, clip_values=(0, 1), random_start=False)
    assert decide(ens, gradkit.pgd(ens, x, y, objective="loss_sum", **kw))[0] == 0
    fooled = gradkit.pgd(ens, x, y, objective="vote_margin", **kw)
    assert decide(ens, fooled)[0] == 1
    np.testing.assert_allclose(fooled, [[0.55, 0.5]], atol=1e-6)  # the first iterate that fooled the vote


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(eps=-0.1), ValueError, "`eps` must be >= 0"),
        (dict(eps=0.1, loss="hinge"), ValueError, "`loss` must be one of"),
        (dict(eps=0.1, steps=0), ValueError, "`steps` must be an integer >= 1"),
        (dict(eps=0.1, n_restarts=1.5), TypeError, "`n_restarts` must be an integer"),
        (dict(eps=0.1, objective="max"), ValueError, "`objective` must be one of"),
    ],
)
def test_apgd_bad_input(digits_mlp, kwargs, error, match):
    model, x, y = digits_mlp
    with pytest.raises(error, match=match):
        gradkit.apgd(model, x[:4], y[:4], **kwargs)


def test_dlr_needs_enough_classes_and_square_needs_queries():
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(3)(inp))
    x, y = np.zeros((2, 3), "float32"), np.array([0, 1])
    gradkit.apgd(model, x, y, eps=0.1, loss="dlr", steps=2)  # 3 classes: untargeted DLR works
    with pytest.raises(ValueError, match="at least 4 classes targeted"):
        gradkit.apgd(model, x, y, eps=0.1, loss="dlr", targeted=True)
    with pytest.raises(ValueError, match="`n_queries` must be an integer >= 1"):
        gradkit.square(model, x, y, eps=0.1, n_queries=0)
    with pytest.raises(TypeError, match="single-input"):
        gradkit.square(model, [x], y, eps=0.1)
    with pytest.raises(ValueError, match="`y` \\(the target classes\\) is required"):
        gradkit.square(model, x, None, eps=0.1, targeted=True)  # predictions as targets: "fooled" at once


def test_apgd_t_runs_its_targets_together_and_keeps_the_first_that_succeeds(digits_mlp, monkeypatch):
    """APGD-T stacks the rows of all its targets into one run (rows independent, so it equals one run
    per target); a point keeps the example of the first target (in rank order) that fooled it, else
    its first target's best iterate. A stand-in core decides which (point, target) rows succeed."""
    _apgd_attack = sys.modules["gradkit.attacks.apgd"]  # the module (`gradkit.attacks.apgd`: the function)

    model, x, y = digits_mlp
    x, y, n, k = x[:12], y[:12], 12, 4
    calls = []

    def fake_core(frame, x0, labels, targets, **options):
        calls.append(len(x0))
        j, i = np.divmod(np.arange(len(x0)), n)  # target-major rows: target j of point i
        hit = (i % 4 == j) & (j > 0)  # point i is fooled by target i % 4, unless that is target 0
        hit |= (i % 4 == 3) & (j == 2)  # ... and points 3, 7, 11 by target 2 before target 3
        return x0 + np.float32(0.01) * (j + 1)[:, None], hit

    monkeypatch.setattr(_apgd_attack, "run", fake_core)
    with gradkit.attacks.recording() as record:
        adv = gradkit.apgd(
            model, x, y, eps=0.1, loss="dlr", targeted=True, n_target_classes=k, clip_values=(0, 1)
        )
    success = record.success
    assert calls == [n * k]  # one run for the 4 targets
    first = np.array([[0, 1, 2, 2][i % 4] for i in range(n)])
    np.testing.assert_array_equal(success, np.arange(n) % 4 != 0)
    np.testing.assert_allclose(adv, x + 0.01 * (first + 1)[:, None], atol=1e-6)  # target 0: best iterate
    monkeypatch.setattr(_apgd_attack, "STACKED_VALUES", n * x.shape[1] * 2)  # two targets per run
    assert [len(g) for g in _apgd_attack._groups([0, 1, 2, 3, 4], n, x.shape[1])] == [2, 2, 1]


@pytest.mark.parametrize("batch_size", [None, 7])
def test_a_bound_forward_gives_forward_and_traces_nothing_new(digits_mlp, batch_size):
    """`AttackGradient.bind` (Square's forward pass on fixed rows) equals `forward`, for a model and an
    ensemble, untargeted and targeted, batched or not, through the same compiled function."""
    from gradkit.gradients import AttackGradient

    model, x, y = digits_mlp
    x, y = x[:20], y[:20]
    targets = (y + 1) % 10
    for target in (model, gradkit.WeightedEnsemble([model, model], [0.7, 0.3])):
        for targeted, t in ((False, None), (True, targets)):
            objective = AttackGradient(target, loss="margin", targeted=targeted, batch_size=batch_size)
            values, logits = objective.forward(x, y if t is None else t)
            count = objective.trace_count
            bound = objective.bind(y if t is None else t)
            for scale in (1.0, 0.5):  # new inputs on the same rows
                got = bound(x * scale)
                expected = objective.forward(x * scale, y if t is None else t)
                np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
            assert got[0].dtype == np.float64 and got[1].shape == logits.shape
            assert objective.trace_count == count  # the bound call is the compiled forward
            if len(logits) == 1 and not targeted:  # the margin by hand: max_{j != y} z_j - z_y
                z = logits[0]
                other = np.where(np.eye(10, dtype=bool)[y], -np.inf, z).max(axis=1)
                np.testing.assert_allclose(values, other - z[np.arange(20), y], rtol=1e-5, atol=1e-5)


def test_square_with_its_bound_forward_equals_the_plain_forward(digits_mlp):
    """The numpy reference queries through `Frame.bind`; with the frame's plain `forward` it draws the
    same proposals and gives the same examples and query counts."""
    from gradkit.attacks._frame import Frame
    from oracles.square import square_core

    model, x, y = digits_mlp
    x, y = x[:60], y[:60]
    options = dict(eps=0.1, norm=np.inf, n_queries=80, p_init=0.8, clip_values=(0.0, 1.0))
    runs = []
    for bound in (True, False):
        session = Frame(model, x, y, loss="margin", clip_values=(0, 1), single_input="Square")
        runs.append(square_core(session.forward, session.x0, session.labels, rng=0,
                                bind=session.bind if bound else None, **options))  # fmt: skip
        runs[-1] += (session.n_forwards,)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    adv, success, used, forwards = runs[0]
    assert forwards == used.sum() and 0 < success.sum() < 60
    # gradkit.square runs on the attack engine (its own random stream): the same success rate
    options.pop("clip_values")
    with gradkit.attacks.recording() as session:
        adv = gradkit.square(model, x, y, seed=0, clip_values=(0, 1), **options)
    engine_success = session.success
    assert abs(engine_success.mean() - success.mean()) <= 0.15 and session.n_gradients == 0
    np.testing.assert_array_equal(engine_success, decide(model, adv) != y)


@pytest.mark.parametrize("norm, eps", [(np.inf, 0.1), (np.inf, 8 / 255), (2, 1.0)])
def test_examples_are_in_the_ball_exactly_as_a_user_checks_it(digits_mlp, norm, eps):
    """`x0 + float32(0.1)` can lie 0.10000002 from `x0`; every attack's examples are within eps in
    float32 and in float64 arithmetic (no tolerance), and inside the box."""
    model, x, y = digits_mlp
    common = dict(eps=eps, norm=norm, clip_values=(0, 1))
    examples = {
        "fgsm": gradkit.fgsm(model, x, y, **common),
        "pgd": gradkit.pgd(model, x, y, eps_step=eps / 4, steps=5, random_start=True, seed=0, **common),
        "apgd": gradkit.apgd(model, x, y, steps=10, seed=0, **common),
        "apgd-t": gradkit.apgd(model, x, y, steps=5, targeted=True, n_target_classes=2, seed=0, **common),
        "square": gradkit.square(model, x, y, n_queries=30, seed=0, **common),
        "evaluate": gradkit.evaluate(model, x, y, steps=5, n_queries=30, verbose=0, **common).x_adv,
    }
    for name, adv in examples.items():
        assert adv.dtype == np.float32 and adv.min() >= 0 and adv.max() <= 1, name
        for dtype in (np.float32, np.float64):
            delta = (adv.astype(dtype) - x.astype(dtype)).reshape(len(x), -1)
            size = np.abs(delta).max(axis=1) if norm == np.inf else np.linalg.norm(delta, axis=1)
            assert size.max() <= eps, (name, dtype, float(size.max()))
        if norm == np.inf and name != "square":  # sign steps end on the ball's face: eps to 1e-7
            assert np.abs(adv - x).max() > eps - 1e-7, name
