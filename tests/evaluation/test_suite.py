"""`gradkit.evaluate` (`gradkit.evaluation._suite`): the cascade, the per-sample worst case, resume, flags
and bad input; ensembles judged on their vote.

The first half replaces `gradkit.attacks.run_attack` with a fake whose outcome is known per point; the
second runs the real attacks on trained models."""

import json
import os
import types

import keras
import numpy as np
import pytest

import gradkit
from gradkit import attacks as registry
from gradkit.attacks import decide
from gradkit.evaluation import Evaluation, check_curve, evaluate
from gradkit.gradients import WeightedEnsemble
from helpers.binary import binary_model, diagonal_data, hand_accuracy
from helpers.models import loud_ensemble

THRESHOLDS = {
    "fgsm": 0.2,
    "pgd": 0.3,
    "apgd-ce": 0.5,
    "apgd-dlr": 0.5,
    "apgd-t": 0.6,
    "fab-t": 0.6,
    "square": 0.7,
}


OFFSETS = {
    "fgsm": 1e-3,
    "pgd": 2e-3,
    "apgd-ce": 3e-3,
    "apgd-dlr": 4e-3,
    "apgd-t": 5e-3,
    "fab-t": 5.5e-3,
    "square": 6e-3,
}


def linear(n_features=4, n_classes=5, seed=0):
    model = keras.Sequential([keras.Input((n_features,)), keras.layers.Dense(n_classes, use_bias=False)])
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=(n_features, n_classes)).astype("float32")
    weights[1] = 0  # feature 1 carries the fake attacks' offsets: the decision ignores it
    model.set_weights([weights])
    return model


@pytest.fixture
def data():
    """60 points, labels = the model's own decisions except 6 flipped ones (misclassified clean)."""
    model = linear()
    rng = np.random.default_rng(1)
    x = rng.uniform(0.2, 0.8, (60, 4)).astype("float32")
    x[:, 0] = np.linspace(0.01, 0.99, 60)
    y = registry.decide(model, x)
    y[::10] = (y[::10] + 1) % 5
    return model, x, y


SENTINEL = 10.0  # a fake adversarial example carries it in feature 3; the fake decision rule obeys it


real_decide = registry.decide


def fake_decide(model, x, batch_size=None):
    """The real decision, shifted by one class on rows marked by a fake attack."""
    predictions = real_decide(model, np.where(np.asarray(x) > SENTINEL / 2, 0.5, x), batch_size)
    return np.where(np.asarray(x)[:, 3] > SENTINEL / 2, (predictions + 1) % 5, predictions)


class Fake:
    """A fake `run_attack`: records its calls; optionally fails on one attack name, reports zero gradients,
    probabilities, or successes that are not real (`lie`)."""

    def __init__(self, fail_on=None, zero=False, probabilities=False, lie=False):
        self.calls, self.fail_on, self.zero, self.probabilities, self.lie = (
            [],
            fail_on,
            zero,
            probabilities,
            lie,
        )

    def __call__(self, name, model, x, y, *, eps, norm, clip_values, batch_size, seed, **options):
        self.calls.append((name, len(x), options.get("objective")))
        if name == self.fail_on:
            raise KeyboardInterrupt("stopped")
        success = x[:, 0] < THRESHOLDS[name]
        x_adv = x.copy()
        x_adv[:, 1] += OFFSETS[name]
        x_adv[success & (not self.lie), 3] = SENTINEL
        zero = (x[:, 0] > 0.9) if self.zero else None
        return types.SimpleNamespace(
            x_adv=x_adv,
            success=success,
            n_forwards=len(x),
            n_gradients=0 if name == "square" else 2 * len(x),
            zero_gradient=zero,
            from_probabilities=self.probabilities,
        )


def install(monkeypatch, fake):
    monkeypatch.setattr(registry, "run_attack", fake)
    monkeypatch.setattr(registry, "decide", fake_decide)
    return fake


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch, Fake())


def test_cascade_keeps_the_per_sample_worst_case(data, fake):
    model, x, y = data
    ev = evaluate(
        model, x, y, eps=0.1, attacks=["apgd-ce", "apgd-t", "square"], verbose=0
    )  # AA without FAB-T
    clean = registry.decide(model, x) == y
    d = x[:, 0]
    assert ev.attacks == ["apgd-ce", "apgd-t", "square"]
    assert ev.clean_accuracy == pytest.approx(clean.mean())
    np.testing.assert_array_equal(ev.robust, clean & (d >= 0.7))
    assert ev.robust_accuracy == pytest.approx(ev.robust.mean())
    expected = np.where(~clean, "clean", np.where(d < 0.5, "apgd-ce", np.where(d < 0.6, "apgd-t", "square")))
    expected = np.where(clean & (d >= 0.7), None, expected)
    assert ev.broken_by == expected.tolist()
    # each attack ran only on the points still robust
    assert [c[:2] for c in fake.calls] == [
        ("apgd-ce", clean.sum()),
        ("apgd-t", (clean & (d >= 0.5)).sum()),
        ("square", (clean & (d >= 0.6)).sum()),
    ]
    offset = (ev.x_adv - x)[:, 1]
    np.testing.assert_allclose(offset[~clean], 0)
    np.testing.assert_allclose(offset[clean & (d < 0.5)], OFFSETS["apgd-ce"], atol=1e-6)
    np.testing.assert_allclose(offset[ev.robust], OFFSETS["square"], atol=1e-6)  # the last one tried
    record = ev.per_attack["apgd-t"]
    assert record["n_points"] == (clean & (d >= 0.5)).sum()
    assert record["n_broken"] == (clean & (d >= 0.5) & (d < 0.6)).sum()
    assert record["accuracy"] == pytest.approx(1 - record["n_broken"] / record["n_points"])
    assert ev.per_attack["square"]["robust_accuracy"] == pytest.approx(ev.robust_accuracy)
    assert ev.n_gradients == 2 * (record["n_points"] + ev.per_attack["apgd-ce"]["n_points"])
    assert [f["name"] for f in ev.flags] == ["gradient_masking"]
    assert "1802.00420" in ev.flags[0]["reference"]
    assert json.loads(json.dumps(ev.to_dict()))["norm"] == "linf"
    assert "apgd-t" in str(ev) and "gradient_masking" in str(ev)


def test_custom_list_objectives_and_callables(data, fake):
    model, x, y = data

    def nudge(model, x, y, eps):
        return np.clip(x + eps, 0, 1)

    ev = evaluate(model, x, y, eps=0.05, attacks=["fgsm", "pgd/vote_margin", nudge], steps=7, verbose=0)
    assert ev.attacks == ["fgsm", "pgd/vote_margin", "nudge"]
    assert fake.calls[1][0] == "pgd" and fake.calls[1][2] == "vote_margin"
    assert set(ev.broken_by) <= {"clean", "fgsm", "pgd/vote_margin", "nudge", None}
    assert (
        ev.per_attack["nudge"]["n_points"]
        == ev.per_attack["pgd/vote_margin"]["n_points"] - (ev.per_attack["pgd/vote_margin"]["n_broken"])
    )
    with pytest.raises(ValueError, match="eps-ball"):
        evaluate(model, x, y, eps=0.05, attacks=[lambda model, x, y, eps: x + 2 * eps], verbose=0)


def test_resume_continues_after_the_last_finished_attack(data, monkeypatch, tmp_path):
    model, x, y = data
    path = tmp_path / "run" / "eval.json"
    install(monkeypatch, Fake(fail_on="square"))
    with pytest.raises(KeyboardInterrupt):
        evaluate(model, x, y, eps=0.1, state_path=path, verbose=0)
    assert sorted(os.listdir(path.parent)) == ["eval.3.npz", "eval.json"]  # APGD-CE, APGD-T, FAB-T done
    rest = install(monkeypatch, Fake())
    resumed = evaluate(model, x, y, eps=0.1, state_path=path, verbose=0)
    assert [c[0] for c in rest.calls] == ["square"]
    assert sorted(os.listdir(path.parent)) == ["eval.4.npz", "eval.json"]
    install(monkeypatch, Fake())
    whole = evaluate(model, x, y, eps=0.1, verbose=0)
    assert resumed.broken_by == whole.broken_by
    np.testing.assert_array_equal(resumed.x_adv, whole.x_adv)
    assert resumed.per_attack.keys() == whole.per_attack.keys()
    again = install(monkeypatch, Fake())
    assert evaluate(model, x, y, eps=0.1, state_path=path, verbose=0).broken_by == whole.broken_by
    assert again.calls == []


def test_state_of_another_evaluation_is_refused_untouched(data, fake, tmp_path):
    model, x, y = data
    path = tmp_path / "eval.json"
    evaluate(model, x, y, eps=0.1, state_path=path, verbose=0)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    n_calls = len(fake.calls)
    for change in ({"eps": 0.2}, {"seed": 1}, {"attacks": ["apgd-ce"]}, {"y": np.roll(y, 1)}):
        args = {"eps": 0.1, "y": y, **change}
        with pytest.raises(ValueError, match="`state_path` must be a new file or the state of this same"):
            evaluate(model, x, state_path=path, verbose=0, **args)
    other = linear()  # the same architecture and weights: the same evaluation
    assert evaluate(other, x, y, eps=0.1, state_path=path, verbose=0).broken_by is not None
    assert len(fake.calls) == n_calls  # resumed: nothing attacked
    other.layers[-1].kernel.assign(other.layers[-1].kernel * 1.001)  # weights changed (trained further)
    ensemble = WeightedEnsemble([model, model], [0.5, 0.5])  # another model
    for changed in (other, ensemble):
        with pytest.raises(ValueError, match=r"same model and weights"):
            evaluate(changed, x, y, eps=0.1, state_path=path, verbose=0)
    assert len(fake.calls) == n_calls
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"attacks": ["apgd-ce", "nope"]}, ValueError, r"`attacks\[1\]` must be"),
        (
            {"attacks": "autoattack"},
            ValueError,
            r"`attacks` must be \"standard\", an attack name or a list.*autoattack",
        ),
        ({"attacks": ["apgd-ce/nope"]}, ValueError, r"`attacks\[0\]` must be"),
        ({"attacks": [3]}, TypeError, r"`attacks\[0\]` must be"),
        ({"attacks": []}, ValueError, "`attacks` must be"),
        ({"attacks": ["fgsm", "fgsm"]}, ValueError, "repeated"),
        ({"attacks": ["fgsm", "standard"]}, ValueError, r"`attacks\[1\]` must be an attack name \(\"stan"),
        ({"y": None}, ValueError, r"`y` \(the true labels\) is required"),
        ({"eps": -0.1}, ValueError, "`eps` must be"),
        ({"n_queries": 0}, ValueError, "`n_queries` must be"),
        ({"steps": 0}, ValueError, "`steps` must be"),
        ({"norm": 3}, ValueError, "`norm` must be"),
        ({"y": "out of range"}, ValueError, "outside"),
        ({"clip_values": (0.3, 1.0)}, ValueError, "`x` must be inside clip_values"),
        ({"state_path": 5}, TypeError, "`state_path` must be"),
    ],
)
def test_bad_input_fails_before_any_work(data, fake, tmp_path, change, error, match):
    model, x, y = data
    args = {"eps": 0.1, "state_path": tmp_path / "eval.json", **change}
    if isinstance(args.get("y"), str):
        args["y"] = np.full(len(x), 5)
    y = args.pop("y", y)
    with pytest.raises(error, match=match):
        evaluate(model, x, y, verbose=0, **args)
    assert fake.calls == [] and list(tmp_path.iterdir()) == []


def test_dlr_attacks_need_enough_classes(fake):
    model = linear(n_classes=3)
    x = np.random.default_rng(0).uniform(0, 1, (8, 4)).astype("float32")
    with pytest.raises(ValueError, match="needs at least 4"):
        evaluate(model, x, registry.decide(model, x), eps=0.1, attacks=["apgd-t"], verbose=0)
    ev = evaluate(model, x, registry.decide(model, x), eps=0.1, verbose=0)  # standard drops APGD-T
    assert ev.attacks == ["apgd-ce", "fab-t", "square"] and ev.skipped[0][0] == "apgd-t"


def test_zero_gradient_and_probability_flags(data, monkeypatch):
    model, x, y = data
    install(monkeypatch, Fake(zero=True, probabilities=True))
    ev = evaluate(model, x, y, eps=0.1, attacks=["apgd-ce"], verbose=0)
    flags = {f["name"]: f for f in ev.flags}
    assert set(flags) == {"zero_gradient", "probabilities"}
    assert "2106.09947" in flags["zero_gradient"]["reference"]
    assert "apgd-ce" in flags["probabilities"]["message"]


def test_unconfirmed_successes_are_not_counted(data, monkeypatch):
    model, x, y = data
    install(monkeypatch, Fake(lie=True))
    ev = evaluate(model, x, y, eps=0.1, attacks=["apgd-ce"], verbose=0)
    assert ev.robust_accuracy == ev.clean_accuracy and set(ev.broken_by) == {"clean", None}
    assert [f["name"] for f in ev.flags] == ["unconfirmed_success"]


class Noisy(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed = keras.random.SeedGenerator(0)

    def call(self, x):
        return x + keras.random.normal(keras.ops.shape(x), stddev=0.1, seed=self.seed)


def test_randomized_forward_pass_is_flagged(fake):
    model = keras.Sequential([keras.Input((4,)), Noisy(), keras.layers.Dense(5)])
    x = np.random.default_rng(0).uniform(0, 1, (16, 4)).astype("float32")
    ev = evaluate(model, x, np.zeros(16, int), eps=0.1, attacks=["fgsm"], verbose=0)
    assert "randomized_forward" in [f["name"] for f in ev.flags]


def test_ensemble_runs_both_objectives_and_flags_one_network(data, fake):
    model, x, y = data
    ensemble = WeightedEnsemble([model, linear(seed=1), linear(seed=2)], [0.6, 0.2, 0.1])
    y = registry.decide(ensemble, x)
    ev = evaluate(ensemble, x, y, eps=0.1, verbose=0)
    names = ["apgd-ce/loss_sum", "apgd-ce/vote_margin", "apgd-t/loss_sum", "apgd-t/vote_margin"]
    names += ["fab-t/loss_sum", "fab-t/vote_margin", "square"]
    assert ev.attacks == names
    assert [(c[0], c[2]) for c in fake.calls] == [
        ("apgd-ce", "loss_sum"),
        ("apgd-ce", "vote_margin"),
        ("apgd-t", "loss_sum"),
        ("apgd-t", "vote_margin"),
        ("fab-t", "loss_sum"),
        ("fab-t", "vote_margin"),
        ("square", None),
    ]
    assert "apgd-ce/loss_sum" in ev.broken_by
    assert "one_network" in [f["name"] for f in ev.flags]
    balanced = WeightedEnsemble([model, linear(seed=1), linear(seed=2)], [0.4, 0.3, 0.3])
    ev = evaluate(balanced, x, registry.decide(balanced, x), eps=0.1, attacks=["fgsm"], verbose=0)
    assert "one_network" not in [f["name"] for f in ev.flags]


def _evaluation(eps, robust_accuracy, clip_values=(0.0, 1.0)):
    n = 10
    robust = np.arange(n) < round(robust_accuracy * n)
    return Evaluation(
        0.9,
        robust_accuracy,
        robust,
        [None] * n,
        np.zeros((n, 4), "float32"),
        {},
        0,
        0,
        0.0,
        [],
        eps,
        np.inf,
        ["apgd-ce"],
        "jax",
        clip_values,
    )


def test_check_curve():
    assert check_curve([_evaluation(0.1, 0.5), _evaluation(0.0, 0.9), _evaluation(1.0, 0.0)]) == []
    names = [f["name"] for f in check_curve([_evaluation(0.1, 0.5), _evaluation(0.2, 0.6)])]
    assert names == ["not_decreasing"]
    assert [f["name"] for f in check_curve([_evaluation(1.0, 0.1)])] == ["unbounded_not_zero"]
    assert check_curve([_evaluation(1.0, 0.1, clip_values=None)]) == []
    with pytest.raises(TypeError, match=r"`evaluations\[0\]` must be"):
        check_curve([0.5])


def digits_like(n=120, seed=0):
    """10 classes of 8x8 'images' flattened to 64 features in [0, 1]: class prototypes plus noise."""
    prototypes = np.random.default_rng(0).uniform(0, 1, (10, 64))  # the same classes for every seed
    rng = np.random.default_rng(seed + 1)
    y = np.arange(n) % 10
    x = np.clip(prototypes[y] + rng.normal(0, 0.25, (n, 64)), 0, 1).astype("float32")
    return x, y


def trained(seed=0, epochs=15):
    keras.utils.set_random_seed(seed)
    x, y = digits_like(400, seed=seed + 10)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    return model


@pytest.fixture(scope="module")
def model():
    return trained()


def _check_sound(model, x, y, ev, eps):
    broken = np.array([b not in (None, "clean") for b in ev.broken_by])
    assert (registry.decide(model, ev.x_adv[broken]) != y[broken]).all()
    assert np.abs(ev.x_adv - x).max() <= eps + 1e-5 and ev.x_adv.min() >= 0 and ev.x_adv.max() <= 1
    assert ev.robust_accuracy <= ev.clean_accuracy
    assert ev.robust_accuracy == pytest.approx(np.mean([b is None for b in ev.broken_by]))


def test_standard_on_a_trained_model(model):
    x, y = digits_like(60, seed=3)
    ev = evaluate(model, x, y, eps=0.08, clip_values=(0, 1), steps=10, n_queries=50, batch_size=32, verbose=0)
    _check_sound(model, x, y, ev, 0.08)
    assert ev.attacks == ["apgd-ce", "apgd-t", "fab-t", "square"] and ev.n_gradients > 0 and ev.backend
    assert ev.robust_accuracy < ev.clean_accuracy


def test_cascade_is_never_above_its_deterministic_first_attack(model):
    x, y = digits_like(60, seed=4)
    one = evaluate(model, x, y, eps=0.05, attacks=["fgsm"], clip_values=(0, 1), verbose=0)
    both = evaluate(model, x, y, eps=0.05, attacks=["fgsm", "pgd"], clip_values=(0, 1), steps=10, verbose=0)
    _check_sound(model, x, y, both, 0.05)
    assert not (both.robust & ~one.robust).any()
    assert both.robust_accuracy <= one.robust_accuracy


def test_ensemble_of_trained_models(model):
    ensemble = WeightedEnsemble([model, trained(seed=1, epochs=8)], [0.5, 0.5])
    x, y = digits_like(40, seed=5)
    ev = evaluate(ensemble, x, y, eps=0.08, clip_values=(0, 1), steps=5, n_queries=20, verbose=0)
    _check_sound(ensemble, x, y, ev, 0.08)
    assert [a for a in ev.attacks if "/" in a] == [
        "apgd-ce/loss_sum",
        "apgd-ce/vote_margin",
        "apgd-t/loss_sum",
        "apgd-t/vote_margin",
        "fab-t/loss_sum",
        "fab-t/vote_margin",
    ]
    assert "one_network" not in [f["name"] for f in ev.flags]


def test_real_resume_repeats_no_attack(model, monkeypatch, tmp_path):
    x, y = digits_like(40, seed=6)
    kwargs = dict(
        eps=0.05, clip_values=(0, 1), steps=5, n_queries=20, state_path=tmp_path / "s.json", verbose=0
    )
    first = evaluate(model, x, y, **kwargs)
    install(monkeypatch, Fake(fail_on="apgd-ce"))
    second = evaluate(model, x, y, **kwargs)
    assert second.broken_by == first.broken_by and second.per_attack == first.per_attack
    np.testing.assert_array_equal(second.x_adv, first.x_adv)


@pytest.mark.parametrize(
    ("broken", "attacked", "flagged"),
    [(1, 352, False), (1, 10, False), (3, 352, False), (4, 352, True), (2, 10, True), (0, 5, False)],
)
def test_gradient_masking_needs_more_than_a_stray_point(broken, attacked, flagged):
    """Square's late breaks flag masking from 2 points and more than 1% of those it attacked."""
    from gradkit.evaluation import _flags

    entries = [types.SimpleNamespace(name=n, attack=n) for n in ("apgd-ce", "apgd-t", "square")]
    per_attack = {"apgd-ce": {"n_broken": 50, "n_points": 400}, "apgd-t": {"n_broken": 0, "n_points": 352},
                  "square": {"n_broken": broken, "n_points": attacked}}  # fmt: skip
    flags = _flags.late_breaks(entries, per_attack)
    assert [f["name"] for f in flags] == (["gradient_masking"] if flagged else [])
    if flagged:
        assert f"broke {broken} points" in flags[0]["message"]
    late_fgsm = [*entries[:2], types.SimpleNamespace(name="fgsm", attack="fgsm")]
    per_attack["fgsm"] = {"n_broken": 1, "n_points": 352}  # one point: the iterative attacks did not converge
    assert [f["name"] for f in _flags.late_breaks(late_fgsm, per_attack)] == ["one_step_beats_iterative"]


def test_evaluate_breaks_with_vote_margin_what_loss_sum_cannot_and_flags_the_dominant_member():
    ens = loud_ensemble()
    x = np.stack([np.linspace(0.41, 0.49, 8), np.full(8, 0.5)], axis=1).astype("float32")
    y = np.zeros(8, int)
    result = gradkit.evaluate(ens, x, y, eps=0.1, attacks=["apgd-ce/loss_sum", "apgd-ce/vote_margin"],
                              steps=10, clip_values=(0, 1), verbose=0)  # fmt: skip
    assert result.clean_accuracy == 1.0 and result.robust_accuracy == 0.0
    # loss_sum can only win through APGD's random start on the eps-sphere; vote_margin breaks the rest
    assert result.broken_by.count("apgd-ce/vote_margin") >= 4  # half the points
    names = {f["name"] for f in result.flags}
    assert "dominant_gradient" in names and "one_network" in names  # 0.6 > 0.4: member 0 is the vote
    np.testing.assert_array_equal(decide(ens, result.x_adv), np.ones(8))


# Models users bring: one-unit binary heads, scaled logits, non-differentiable layers, an opaque softmax, no
# compiled loss; each with its hand value.
@pytest.mark.parametrize("head", ["sigmoid", "logit"])
@pytest.mark.parametrize("compiled", [True, False])
def test_evaluate_curve_and_ensemble_on_a_one_unit_head(head, compiled):
    x, y = diagonal_data()
    model = binary_model(head, compiled)
    result = gradkit.evaluate(model, x, y, eps=0.1, attacks=["apgd-ce", "square"], n_queries=100, verbose=0)
    assert result.clean_accuracy == 1.0 and result.robust_accuracy == hand_accuracy(x, 0.1)
    curve = gradkit.robustness_curve(model, x, y, attack="pgd", epsilons=[0.0, 0.1], steps=10)
    assert curve["accuracy"] == [1.0, hand_accuracy(x, 0.1)]
    assert np.array_equal(gradkit.WeightedEnsemble([model, model]).predict(x), y)


def _scaled_pair():
    rng = np.random.RandomState(0)
    inp = keras.Input((20,))
    logits = keras.layers.Dense(10)(keras.layers.Dense(32, activation="tanh")(inp))
    base = keras.Model(inp, logits)
    for w in base.weights:
        w.assign(rng.randn(*w.shape).astype("float32"))
    scaled = keras.Model(inp, keras.layers.Rescaling(1e5)(logits))
    x = rng.uniform(0, 1, (60, 20)).astype("float32")
    return base, scaled, x, np.asarray(base.predict(x, verbose=0)).argmax(1)


@pytest.mark.parametrize("attack", ["apgd-dlr", "square"])
def test_dlr_and_square_are_blind_to_the_logits_scale(attack):
    """Logits times 1e5 leave the decision, the DLR loss and the margin's sign unchanged: the attacks
    must break the same points (the true class was once shifted out of the max by only 1e4)."""
    base, scaled, x, y = _scaled_pair()
    kwargs = dict(eps=0.05, clip_values=(0, 1), attacks=[attack], n_queries=300, steps=30, verbose=0)
    a = gradkit.evaluate(base, x, y, **kwargs)
    b = gradkit.evaluate(scaled, x, y, **kwargs)
    assert a.robust_accuracy < 0.8
    assert abs(a.robust_accuracy - b.robust_accuracy) <= 1 / 60 + 1e-9


def _quantized_model():
    rng = np.random.RandomState(0)
    inp = keras.Input((4,))
    rounded = keras.layers.Lambda(lambda t: keras.ops.round(t * 4) / 4)(inp)
    dense = keras.layers.Dense(3)
    model = keras.Model(inp, dense(rounded))
    dense.set_weights([rng.randn(4, 3).astype("float32"), np.zeros(3, "float32")])
    x = rng.uniform(0, 1, (48, 4)).astype("float32")
    return model, x, np.asarray(model.predict(x, verbose=0)).argmax(1)


def test_a_non_differentiable_model_is_flagged_and_square_gives_the_number():
    model, x, y = _quantized_model()
    result = gradkit.evaluate(model, x, y, eps=0.15, clip_values=(0, 1), n_queries=300, verbose=0)
    names = [f["name"] for f in result.flags]
    assert "non_differentiable" in names and "zero_gradient" in names
    assert result.per_attack["apgd-ce"]["no_gradient"] and result.per_attack["apgd-ce"]["n_broken"] == 0
    broken = np.array([b == "square" for b in result.broken_by])
    assert broken.sum() > 0 and result.robust_accuracy == 1.0 - broken.mean()
    # every reported break is real: the examples fool the model, inside the ball and the range
    pred = np.asarray(model.predict(result.x_adv[broken], verbose=0)).argmax(1)
    assert np.all(pred != y[broken]) and np.abs(result.x_adv - x).max() <= 0.15 + 1e-6


def test_classic_attacks_flag_probabilities_like_apgd():
    """A subclassed softmax model: gradkit cannot remove the softmax, so every gradient attack reads
    log-probabilities, and `evaluate` says so for PGD as for APGD."""

    class SoftmaxNet(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return keras.ops.softmax(self.dense(x))

    model = SoftmaxNet()
    x = np.random.RandomState(0).uniform(0, 1, (12, 4)).astype("float32")
    model.compile(loss="sparse_categorical_crossentropy")
    y = np.asarray(model.predict(x, verbose=0)).argmax(1)
    for attack in ("pgd", "apgd-ce"):
        result = gradkit.evaluate(model, x, y, eps=0.05, attacks=[attack], steps=5, verbose=0)
        assert "probabilities" in [f["name"] for f in result.flags], attack


def test_pgd_in_evaluate_needs_no_compiled_loss():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.random.RandomState(0).uniform(0, 1, (12, 4)).astype("float32")
    y = np.asarray(model.predict(x, verbose=0)).argmax(1)
    result = gradkit.evaluate(model, x, y, eps=0.5, attacks=["pgd", "fgsm"], steps=10, verbose=0)
    assert result.clean_accuracy == 1.0 and result.robust_accuracy < 1.0
    x_adv = gradkit.fgsm(model, x, y, eps=0.1)
    assert np.abs(x_adv - x).max() == pytest.approx(0.1, abs=1e-6)


class StopAt(Fake):
    """`Fake` that raises KeyboardInterrupt (Ctrl-C) at the call `(attack, seed)` `stop_at`."""

    def __init__(self, stop_at=None):
        super().__init__()
        self.stop_at, self.seeds = stop_at, []

    def __call__(self, name, *args, seed, **kwargs):
        self.seeds.append((name, seed))
        if self.seeds[-1] == self.stop_at:
            raise KeyboardInterrupt
        return super().__call__(name, *args, seed=seed, **kwargs)


def test_a_half_done_attack_resumes_at_its_next_block(data, monkeypatch, tmp_path):
    """60 points in blocks of 16 (block j seeded 7 + j; APGD-CE breaks all of block 0): stopped in
    APGD-T's second block, the rerun attacks only that block and the later ones, and gives the
    uninterrupted result."""
    model, x, y = data
    path, options = tmp_path / "eval.json", {"eps": 0.1, "batch_size": 16, "seed": 7, "verbose": 0}
    whole_calls = install(monkeypatch, StopAt())
    whole = evaluate(model, x, y, **options)
    t_blocks = [c for c in whole_calls.seeds if c[0] == "apgd-t"]
    assert t_blocks == [("apgd-t", 8), ("apgd-t", 9), ("apgd-t", 10)]
    first = install(monkeypatch, StopAt(stop_at=("apgd-t", 9)))
    with pytest.raises(KeyboardInterrupt):
        evaluate(model, x, y, state_path=path, **options)
    assert sorted(os.listdir(tmp_path)) == ["eval.1.1.npz", "eval.1.npz", "eval.json"]  # APGD-CE, 1 block
    rest = install(monkeypatch, StopAt())
    resumed = evaluate(model, x, y, state_path=path, **options)
    assert rest.seeds == whole_calls.seeds[len(first.seeds) - 1 :]
    assert sorted(os.listdir(tmp_path)) == ["eval.4.npz", "eval.json"]
    assert resumed.broken_by == whole.broken_by
    np.testing.assert_array_equal(resumed.robust, whole.robust)
    np.testing.assert_array_equal(resumed.x_adv, whole.x_adv)
    for name, record in whole.per_attack.items():
        for key in ("accuracy", "robust_accuracy", "n_points", "n_broken", "n_forwards", "n_gradients"):
            assert resumed.per_attack[name][key] == record[key], (name, key)
    assert (resumed.n_forwards, resumed.n_gradients) == (whole.n_forwards, whole.n_gradients)


def test_a_state_of_another_evaluation_names_what_changed(data, fake, tmp_path):
    model, x, y = data
    path = tmp_path / "eval.json"
    evaluate(model, x, y, eps=0.1, seed=3, state_path=path, verbose=0)
    with pytest.raises(gradkit.errors.StateMismatchError) as caught:
        evaluate(model, x, y, eps=0.2, seed=4, state_path=path, verbose=0)
    assert caught.value.changed == ["eps", "seed"] and isinstance(caught.value, ValueError)
    assert "it holds another evaluation: eps (0.1 in the file, 0.2 now), seed (3 in the file, 4 now)." in str(
        caught.value
    )
    assert "To start afresh, pass another state_path or delete it and the .npz files beside it" in str(
        caught.value
    )
    delta = tmp_path / "eval.4.npz"
    delta.write_bytes(delta.read_bytes() + b"0")
    with pytest.raises(gradkit.errors.StateMismatchError, match="eval.4.npz that are missing or altered"):
        evaluate(model, x, y, eps=0.1, seed=3, state_path=path, verbose=0)


def test_states_of_two_ranks_in_one_folder_keep_their_own_arrays(data, fake, tmp_path):
    """`evaluate_processes` names each rank's state `<path>.rank<r>`: their npz files must not collide."""
    model, x, y = data
    paths = [tmp_path / f"eval.json-0.rank{r}" for r in (0, 1)]
    for path in paths:
        evaluate(model, x, y, eps=0.1, batch_size=16, state_path=path, verbose=0)
    assert sorted(os.listdir(tmp_path)) == sorted(f"{p.name}{end}" for p in paths for end in ("", ".4.npz"))
    n_calls = len(fake.calls)
    for path in paths:
        evaluate(model, x, y, eps=0.1, batch_size=16, state_path=path, verbose=0)
    assert len(fake.calls) == n_calls
