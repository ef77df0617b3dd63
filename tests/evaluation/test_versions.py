"""AutoAttack's versions in `gradkit.evaluate` (`gradkit.evaluation._versions`: standard, plus, rand,
custom, and the L1 cascade), the "malt" version, EOT and BPDA."""

import types

import keras
import numpy as np
import pytest

import gradkit
from gradkit import attacks as registry
from gradkit import cli, evaluate
from gradkit.evaluation import _versions
from gradkit.gradients import AttackGradient, WeightedEnsemble
from helpers.models import accuracy, l1_sizes

AMPLITUDE, NOISE = 0.01, 0.15  # the random input layer: phase-noise amplitude, Gaussian noise


def linear(n_features=6, n_classes=4, seed=0, bias=False):
    model = keras.Sequential([keras.Input((n_features,)), keras.layers.Dense(n_classes, use_bias=bias)])
    model.set_weights([np.random.default_rng(seed).normal(size=(n_features, n_classes)).astype("float32")])
    return model


def points(n=40, n_features=6, seed=1):
    return np.random.default_rng(seed).uniform(0.1, 0.9, (n, n_features)).astype("float32")


class Recorder:
    """A `run_attack` that breaks nothing and records `(name, rows, options)` of every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, model, x, y, *, eps, norm, clip_values, batch_size, seed, **options):
        self.calls.append((name, len(x), options))
        n = len(x)
        return types.SimpleNamespace(x_adv=x.copy(), success=np.zeros(n, bool), n_forwards=n, n_gradients=n,
                                     zero_gradient=None, from_probabilities=False)  # fmt: skip


@pytest.fixture
def recorder(monkeypatch):
    fake = Recorder()
    monkeypatch.setattr(registry, "run_attack", fake)
    return fake


# AutoAttack's `set_version` (fra31/auto-attack, autoattack.py), attack by attack, for Linf and L2
AUTOATTACK = {
    "standard": [("apgd-ce", {"n_restarts": 1}), ("apgd-t", {"n_restarts": 1, "n_target_classes": 9}),
                 ("fab-t", {"n_restarts": 1, "n_target_classes": 9}), ("square", {})],
    "plus": [("apgd-ce", {"n_restarts": 5}), ("apgd-dlr", {"n_restarts": 5}), ("fab", {"n_restarts": 5}),
             ("square", {}), ("apgd-t", {"n_restarts": 1, "n_target_classes": 9}),
             ("fab-t", {"n_restarts": 1, "n_target_classes": 9})],
    "rand": [("apgd-ce", {"n_restarts": 1, "eot_iter": 20}), ("apgd-dlr", {"n_restarts": 1, "eot_iter": 20})],
}  # fmt: skip
# MALT (Melamed et al. 2024; the authors' demo: 9 targets, targeted APGD of 100 steps, 1 restart),
# between AutoAttack's APGD-CE and Square
MALT = [
    ("apgd-ce", {"n_restarts": 1}),
    ("apgd-t", {"n_restarts": 1, "n_target_classes": 9, "target_selection": "malt"}),
    ("square", {"query_share": 0.2}),  # the masking check: a fifth of n_queries
]
EXPECTED = {**AUTOATTACK, "malt": MALT}  # fmt: skip


@pytest.mark.parametrize("version", ["standard", "plus", "rand", "malt"])
@pytest.mark.parametrize("norm", [np.inf, 2.0])
def test_table_is_autoattacks(version, norm):
    runs = _versions.runs(version, norm, 20)
    assert [(r.attack, dict(r.settings)) for r in runs] == EXPECTED[version]


def test_l1_standard_has_autoattacks_l1_settings():
    runs = {r.attack: dict(r.settings) for r in _versions.runs("standard", 1.0, 20)}
    assert runs["apgd-ce"] == {"n_restarts": 5, "use_largereps": True}
    assert runs["apgd-t"] == {"n_restarts": 1, "n_target_classes": 5, "use_largereps": True}
    assert list(runs) == ["apgd-ce", "apgd-t", "fab-t", "square"]
    malt = {r.attack: dict(r.settings) for r in _versions.runs("malt", 1.0, 20)}
    malt_t = {**runs["apgd-t"], "target_selection": "malt"}  # the L1 standard's, with MALT's targets
    assert malt == {"apgd-ce": runs["apgd-ce"], "apgd-t": malt_t, "square": {"query_share": 0.2}}


@pytest.mark.parametrize("version", ["standard", "plus", "rand", "malt"])
def test_each_version_runs_its_list_with_its_settings(recorder, version):
    model, x = linear(), points()
    y = registry.decide(model, x)
    ev = evaluate(model, x, y, eps=0.1, version=version, eot_iter=7, verbose=0)
    expected = [(a, {**s, "eot_iter": 7} if "eot_iter" in s else s) for a, s in EXPECTED[version]]
    assert ev.version == version and ev.attacks == [a for a, _ in expected]
    for (name, _, options), (attack, settings) in zip(recorder.calls, expected, strict=True):
        settings = dict(settings)
        share = settings.pop("query_share", 1)
        assert name == attack and {k: options[k] for k in settings} == settings
        assert options.get("steps", 100) == 100 and options.get("n_queries", 5000) == 5000 * share
    assert list(ev.skipped) == []
    assert ev.to_dict()["version"] == version and f"version {version}" in ev.summary()


def test_malt_version_runs_end_to_end_and_the_command_line_takes_it():
    model, x = linear(n_classes=5), points(n=32)
    y = registry.decide(model, x)
    options = dict(eps=0.08, clip_values=(0.0, 1.0), steps=10, n_queries=100, batch_size=16, verbose=0)
    ev = evaluate(model, x, y, version="malt", **options)
    assert ev.version == "malt" and ev.attacks == ["apgd-ce", "apgd-t", "square"] and not ev.skipped
    np.testing.assert_array_equal(ev.robust, registry.decide(model, ev.x_adv) == y)  # the real verdict
    assert 0 < ev.robust_accuracy < 1 and np.abs(ev.x_adv - x).max() <= 0.08 + 1e-6
    malt = ev.per_attack["apgd-t"]  # on the points APGD-CE left: 4 Jacobian rows each, then 4 targets
    n = malt["n_points"]  # APGD-CE broke all it could (a linear model): no early stop in APGD-T
    assert n > 0 and malt["n_broken"] == 0 and malt["n_gradients"] == 4 * n + 4 * 11 * n
    for version in _versions.VERSIONS[:-1]:  # every version but "custom" (the --attacks list)
        args = cli.build_parser().parse_args(
            ["evaluate", "m.keras", "d.npz", "--eps", "0.1", "--version", version]
        )
        assert args.suite == version


def test_attacks_alone_is_custom_and_standard_string_is_the_version(recorder):
    model, x = linear(), points()
    y = registry.decide(model, x)
    assert evaluate(model, x, y, eps=0.1, attacks=["apgd-ce"], verbose=0).version == "custom"
    assert evaluate(model, x, y, eps=0.1, version="custom", attacks="square", verbose=0).attacks == ["square"]
    old = evaluate(model, x, y, eps=0.1, attacks="standard", verbose=0)
    new = evaluate(model, x, y, eps=0.1, verbose=0)
    assert old.version == new.version == "standard" and old.attacks == new.attacks


def test_ensembles_run_both_objectives_in_a_version(recorder):
    model, x = linear(), points()
    ensemble = WeightedEnsemble([model, linear(seed=1), linear(seed=2)], [0.5, 0.3, 0.2])
    ev = evaluate(ensemble, x, registry.decide(ensemble, x), eps=0.1, version="rand", verbose=0)
    names = ["apgd-ce/loss_sum", "apgd-ce/vote_margin", "apgd-dlr/loss_sum", "apgd-dlr/vote_margin"]
    assert ev.attacks == names
    assert [options["objective"] for _, _, options in recorder.calls] == ["loss_sum", "vote_margin"] * 2


def test_too_few_classes_skip_in_a_version_and_refuse_when_asked(recorder):
    model, x = linear(n_classes=3), points()
    y = registry.decide(model, x)
    ev = evaluate(model, x, y, eps=0.1, version="plus", verbose=0)
    assert "apgd-t" not in ev.attacks and "apgd-dlr" in ev.attacks
    assert ["apgd-t", "needs at least 4 classes; the model has 3"] in ev.skipped
    two = linear(n_classes=2)
    for name in ["apgd-dlr", "apgd-t", "fab-t"]:
        with pytest.raises(ValueError, match=f"`attacks` must be free of '{name}' for a model of 2 classes"):
            evaluate(two, x, registry.decide(two, x), eps=0.1, attacks=[name], verbose=0)


def _boom(*args, **kwargs):
    raise AssertionError("an attack ran before the arguments were checked")


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"version": "strong"}, ValueError, "`version` must be one of 'standard', 'plus', 'rand', 'malt', "
                                            "'custom'. "
                                            "Received: version='strong'"),
        ({"version": 1}, TypeError, "`version` must be one of"),
        ({"eot_iter": 0}, ValueError, "`eot_iter` must be an integer >= 1. Received: eot_iter=0"),
        ({"eot_iter": 2.5}, TypeError, "`eot_iter` must be an integer"),
        ({"version": "plus", "attacks": ["apgd-ce"]}, ValueError, "`attacks` must be None with version="),
        ({"version": "rand", "attacks": "standard"}, ValueError, "`attacks` must be None or a list"),
        ({"version": "custom"}, ValueError, '`attacks` must be a list of attacks with version="custom"'),
        ({"surrogate": lambda t: t}, ValueError,
         r"`surrogate` must be a model or callable whose output has the model's shape \(2, 4\). Received: "
         r"surrogate='<output of shape \(2, 6\)>'"),
        ({"surrogate": "identity"}, TypeError, "`surrogate` must be None, a Keras model or a callable"),
    ],
)  # fmt: skip
def test_bad_input_fails_before_any_work(monkeypatch, change, error, match):
    monkeypatch.setattr(registry, "run_attack", _boom)
    model, x = linear(), points()
    with pytest.raises(error, match=match):
        evaluate(model, x, registry.decide(model, x), eps=0.1, verbose=0, **change)


def test_standard_is_never_above_the_worst_case_of_its_attacks_run_separately():
    model, x = linear(bias=False), points(n=32)
    y = registry.decide(model, x)
    options = dict(eps=0.08, clip_values=(0.0, 1.0), steps=10, n_queries=200, batch_size=16, verbose=0)
    ev = evaluate(model, x, y, version="standard", **options)
    alone = [evaluate(model, x, y, attacks=[name], **options).robust for name in ev.attacks]
    worst = np.logical_and.reduce(alone)
    assert 0 < ev.robust_accuracy < 1 and not np.any(ev.robust & ~worst)  # robust there => robust alone
    assert ev.robust_accuracy <= worst.mean()
    three = evaluate(model, x, y, attacks=["apgd-ce", "apgd-t", "square"], **options)
    assert ev.robust_accuracy <= three.robust_accuracy


class Quantize(keras.layers.Layer):
    """x rounded to multiples of 1/4: a non-differentiable input defence (its gradient is zero)."""

    def call(self, x):
        return keras.ops.round(x * 4.0) / 4.0


def quantized(seed=0):
    dense = keras.layers.Dense(4, use_bias=False)
    inputs = keras.Input((6,))
    model = keras.Model(inputs, dense(Quantize()(inputs)))
    surrogate = keras.Model(inputs, dense(inputs))  # BPDA: the quantization replaced by the identity
    model.set_weights([np.random.default_rng(seed).normal(size=(6, 4)).astype("float32")])
    return model, surrogate


def test_surrogate_gradient_is_the_surrogates_at_the_real_logits():
    model, surrogate = quantized()
    x, y = points(n=5), np.array([0, 1, 2, 3, 0])
    values, logits, grad = AttackGradient(model, surrogate=surrogate)(x, y)
    (w,) = model.get_weights()
    z = np.round(x * 4.0) / 4.0 @ w  # the real model's logits
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(logits[0], z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, -np.log(p[np.arange(5), y]), rtol=1e-4, atol=1e-5)
    # dCE/dz at the real logits, times the surrogate's Jacobian dz/dx = w.T
    np.testing.assert_allclose(grad, (p - np.eye(4)[y]) @ w.T, rtol=1e-4, atol=1e-5)


def test_bpda_recovers_what_the_non_differentiable_defence_hides():
    model, surrogate = quantized()
    x = points(n=40)
    y = registry.decide(model, x)
    options = dict(eps=0.3, clip_values=(0.0, 1.0), steps=20, verbose=0, attacks=["apgd-ce"])
    plain = evaluate(model, x, y, **options)
    bpda = evaluate(model, x, y, surrogate=surrogate, **options)
    assert "non_differentiable" in [f["name"] for f in plain.flags] and plain.robust_accuracy == 1.0
    assert "surrogate=" in next(f["message"] for f in plain.flags if f["name"] == "non_differentiable")
    assert bpda.robust_accuracy <= 0.3 and [f["name"] for f in bpda.flags] == ["eps_large"]  # 30% of [0, 1]
    wrong = np.argmax(model.predict(bpda.x_adv, verbose=0), axis=1) != y  # judged on the real model
    np.testing.assert_array_equal(wrong, ~bpda.robust)
    assert np.abs(bpda.x_adv - x).max() <= 0.3 + 1e-6
    assert evaluate(model, x, y, surrogate=lambda t: surrogate(t), **options).robust_accuracy <= 0.3


def test_eot_of_a_deterministic_model_is_its_gradient():
    model, x = linear(), points(n=8)
    y = registry.decide(model, x)
    one, three = AttackGradient(model)(x, y), AttackGradient(model, eot_iter=3)(x, y)
    for a, b in zip(one, three):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rand_on_a_deterministic_model_reports_only_what_its_examples_do():
    """Under EOT an APGD row returns its iterate of highest expected loss; its success is that iterate's
    own decision, never an earlier iterate's (the cascade's confirmation flagged 'unconfirmed_success'
    on a deterministic model before)."""
    keras.utils.set_random_seed(0)
    layers = [keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    x = np.random.default_rng(1).uniform(0, 1, (200, 8)).astype("float32")
    y = np.argmax(model.predict(x, verbose=0), axis=1)
    options = dict(version="rand", eot_iter=2, eps=0.1, clip_values=(0.0, 1.0), steps=5, verbose=0)
    rand = evaluate(model, x, y, **options)
    assert not rand.flags, rand.flags
    np.testing.assert_array_equal(rand.robust, np.argmax(model.predict(rand.x_adv, verbose=0), axis=1) == y)
    assert 0.05 < rand.robust_accuracy < 0.95  # the attack broke some points, not all


class RandomInput(keras.layers.Layer):
    """x + 0.15 N(0, 1) + 0.01 sin(200 x + phi), phi ~ U(0, 2 pi), new at every call (inference included):
    its value jitters a little, its input gradient a lot (one draw's points anywhere; their mean, along
    the classifier's weights)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(0)

    def call(self, x):
        shape = keras.ops.shape(x)
        phase = keras.random.uniform(shape, 0.0, 2 * np.pi, seed=self.seed_generator)
        noise = keras.random.normal(shape, seed=self.seed_generator)
        return x + NOISE * noise + AMPLITUDE * keras.ops.sin(200.0 * x + phase)


def test_rand_version_beats_standard_on_a_randomized_model():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4)).astype("float32")
    x = rng.uniform(0, 1, (4000, 8)).astype("float32")
    top = np.sort(x @ w, axis=1)
    margin = top[:, -1] - top[:, -2]  # 30 points within reach of eps (0.3-0.6), 30 beyond it (> 1.5)
    x = np.concatenate([x[(margin > 0.3) & (margin < 0.6)][:30], x[margin > 1.5][:30]])
    y = np.argmax(x @ w, axis=1)
    model = keras.Sequential([keras.Input((8,)), RandomInput(), keras.layers.Dense(4, use_bias=False)])
    model.set_weights([w])
    options = dict(eps=0.15, clip_values=(0.0, 1.0), steps=20, n_queries=100, verbose=0)
    standard = evaluate(model, x, y, version="standard", **options)
    rand = evaluate(model, x, y, version="rand", **options)
    assert "randomized_forward" in [f["name"] for f in standard.flags]
    assert 'version="rand"' in next(f["message"] for f in standard.flags if f["name"] == "randomized_forward")
    assert rand.robust_accuracy <= standard.robust_accuracy - 0.05 + 1e-9  # 3 of the 60 points at least
    repeated = np.mean([np.argmax(model.predict(rand.x_adv, verbose=0), axis=1) == y for _ in range(20)])
    assert rand.robust_accuracy <= repeated  # what 20 predictions of its examples confirm
    assert np.abs(rand.x_adv - x).max() <= 0.15 + 1e-6


def test_evaluate_l1_runs_autoattacks_l1_cascade(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:48], y[:48]
    result = gradkit.evaluate(model, x, y, eps=2.0, norm=1, clip_values=(0, 1), steps=10, n_queries=50,
                              batch_size=48, verbose=0)  # fmt: skip
    assert result.attacks == ["apgd-ce", "apgd-t", "fab-t", "square"]  # AutoAttack's L1 standard list
    assert (
        result.to_dict()["norm"] == "l1"
        and "eps=2 (L1; 3.12% of the box's L1 diameter 64" in result.summary()
    )
    assert l1_sizes(result.x_adv, x).max() <= 2.0
    assert accuracy(model, result.x_adv, y) == result.robust_accuracy < result.clean_accuracy - 0.3
    steps = [result.per_attack[name]["robust_accuracy"] for name in result.attacks]
    assert steps == sorted(steps, reverse=True) and steps[-1] == result.robust_accuracy  # the cascade
    curve = gradkit.robustness_curve(model, x, y, attack="apgd", epsilons=[0.0, 1.0, 3.0], norm=1, steps=10,
                                     clip_values=(0, 1), seed=0, batch_size=48)  # fmt: skip
    assert curve["accuracy"][0] == accuracy(model, x, y)
    assert curve["accuracy"][2] < curve["accuracy"][0] - 0.3  # the L1 attack ran at every eps
