"""Adversarial boosting (`gradkit.boosting._adversarial`): rounds in "augment" mode train on clean plus
attacked copies and are judged on their adversarial examples; in "fit" mode the members are adversarially
trained inside `fit`; the `adversarial` dict's checks, defaults, saving and resume."""

import functools
import zipfile

import keras
import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import gradkit
from gradkit.attacks import pgd
from gradkit.boosting import SAMME, AdaBoostM1

# training's private record of what is installed: the seam that shows a member keeps no trace of it
from gradkit.training._install import installed_state

from conftest import blobs, tsipras

PGD = {"attack": "pgd", "eps": 0.3, "steps": 3, "eps_step": 0.25, "seed": 0, "clip_values": (-5.0, 5.0)}
FIT = {"epochs": 4, "batch_size": 16}


def data():
    return blobs()


class Recording(keras.Sequential):
    """Records, for every `fit`, the rows, the sample weights and the adversarial settings installed."""

    seen = []

    def fit(self, x=None, y=None, sample_weight=None, **kwargs):
        state = installed_state(self)
        Recording.seen.append((len(x), np.array(sample_weight), state and state.settings))
        return super().fit(x, y, sample_weight=sample_weight, **kwargs)


def learner(cls=Recording):
    model = cls([keras.Input((2,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss=loss)
    return model


def boosted(adversarial, build=learner, **kwargs):
    return SAMME(build, n_estimators=2, fit_kwargs=FIT, random_state=0, adversarial=adversarial, verbose=0,
               **kwargs)  # fmt: skip


def test_fit_mode_trains_each_member_adversarially_once_and_judges_it_on_its_own_examples():
    Recording.seen.clear()
    x, y = data()
    est = boosted({**PGD, "mode": "fit", "loss": "trades", "beta": 1.0}).fit(x, y)
    assert len(est.estimators_) == 2 and [s[0] for s in Recording.seen] == [60, 60]  # one fit per round
    for _, _, settings in Recording.seen:  # PGD inside each training step, the dict's settings
        assert (settings.attack, settings.eps, settings.steps, settings.eps_step) == ("pgd", 0.3, 3, 0.25)
        assert (settings.loss, settings.beta, settings.clip_values) == ("trades", 1.0, (-5.0, 5.0))
    np.testing.assert_allclose(Recording.seen[0][1], np.ones(60))  # boosting weights, mean 1
    assert Recording.seen[1][1].std() > 0 and Recording.seen[1][1].mean() == pytest.approx(1.0)
    for member in est.estimators_:  # no trace of adversarial training left on the members
        assert installed_state(member) is None and "compute_loss" not in vars(member)
    first = est.estimators_[0]  # round 0: wrong on the clean point or on PGD against the member
    x_adv = pgd(first, x, y, **{k: v for k, v in PGD.items() if k != "attack"})
    wrong = (first.predict(x, verbose=0).argmax(1) != y) | (first.predict(x_adv, verbose=0).argmax(1) != y)
    assert 0 < wrong.mean() < 2 / 3
    assert est.estimator_errors_[0] == pytest.approx(wrong.mean(), abs=1e-12)
    assert est.estimator_errors_[0] > np.mean(first.predict(x, verbose=0).argmax(1) != y)


def mlp():
    model = keras.Sequential(
        [keras.Input((31,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_fit_mode_members_are_robust_where_plain_boosting_is_not():
    (x, y), (xt, yt) = tsipras(512, 0), tsipras(256, 1)
    eps, options = 0.6, {"n_estimators": 2, "fit_kwargs": {"epochs": 20, "batch_size": 64}, "verbose": 0}
    plain = AdaBoostM1(mlp, random_state=0, **options).fit(x, y)
    attack = {"attack": "pgd", "eps": eps, "eps_step": eps / 4, "steps": 7, "seed": 0, "mode": "fit"}
    robust = AdaBoostM1(mlp, random_state=0, adversarial=attack, **options).fit(x, y)
    accuracy = {}
    for name, est in (("plain", plain), ("robust", robust)):
        x_adv = pgd(est, xt, yt, eps=eps, eps_step=eps / 4, steps=10, seed=0, objective="vote_margin")
        accuracy[name] = float(np.mean(est.predict(x_adv) == yt))
    assert accuracy["robust"] > accuracy["plain"] + 0.25, accuracy  # TensorFlow: 0.94 vs 0.31
    assert robust.score(xt, yt) > 0.8


@pytest.mark.parametrize(
    "adversarial,match",
    [
        ({"attack": "pgd", "eps": 0.1, "mode": "madry"}, r'`adversarial\["mode"\]` must be one of'),
        ({"attack": "pgd", "eps": 0.1, "mode": 1}, r'adversarial\["mode"\]=1'),
        ({"attack": "pgd", "eps": 0.1, "mode": "fit", "stepz": 3}, r"unknown keys \['stepz'\]"),
        ({"attack": "fgsm", "eps": 0.1, "ratio": 0.5}, r"unknown keys \['ratio'\]"),  # a training key
        ({"attack": "pgd", "eps": 0.1, "loss": "trades"}, r'\["loss"\]` must be in "augment" mode'),
        ({"attack": "fgsm", "eps": 0.1, "loss": "ce"}, r'need adversarial\["mode"\]="fit"'),
    ],
)
def test_bad_mode_or_key_fails_before_training(adversarial, match):
    Recording.seen.clear()
    with pytest.raises(ValueError, match=match):
        boosted(adversarial).fit(*data())
    assert Recording.seen == []
    with pytest.raises(TypeError, match="Keras"):  # fit mode needs Keras learners, as augment does
        SAMME(lambda: DecisionTreeClassifier(max_depth=1), adversarial={**PGD, "mode": "fit"}).fit(*data())


def test_fit_mode_saves_resumes_and_loads_without_a_trace(tmp_path):
    x, y = data()
    adversarial, plain = {**PGD, "mode": "fit"}, lambda: learner(keras.Sequential)
    whole = boosted(adversarial, plain).fit(x, y)
    path = tmp_path / "ckpt"
    first = boosted(adversarial, plain, checkpoint_dir=str(path)).set_params(n_estimators=1).fit(x, y)
    assert len(first.estimators_) == 1
    with pytest.raises(ValueError, match="adversarial"):  # a checkpoint of the other mode is refused
        boosted({**PGD, "mode": "augment"}, plain, checkpoint_dir=str(path)).fit(x, y, resume=True)
    resumed = boosted(adversarial, plain, checkpoint_dir=str(path)).fit(x, y, resume=True)
    np.testing.assert_allclose(resumed.estimator_weights_, whole.estimator_weights_, rtol=1e-5)
    np.testing.assert_array_equal(resumed.predict(x), whole.predict(x))
    loaded = gradkit.load(path)
    assert loaded.adversarial["mode"] == "fit" and len(loaded.estimators_) == 2
    np.testing.assert_array_equal(loaded.predict(x), resumed.predict(x))
    for member in loaded.estimators_:
        assert installed_state(member) is None and "compute_loss" not in vars(member)
    for name in sorted(p.name for p in path.iterdir() if p.suffix == ".keras"):
        with zipfile.ZipFile(path / name) as f:
            assert "gradkit_adversarial" not in f.read("config.json").decode()


@pytest.mark.parametrize("mode", ["augment", "fit"])
def test_pgd_without_steps_takes_adversarial_trainings_defaults(mode, monkeypatch):
    """`gradkit.pgd` needs `steps` and `eps_step`; boosting fills them as `adversarial_training` does
    (7 steps of 2.5 * eps / 7) instead of failing after the first round's training."""
    from gradkit.boosting import _adversarial

    seen = []
    real = _adversarial.ATTACKS["pgd"]

    @functools.wraps(real)  # the same signature: the key check reads it
    def recording(model, x, y, **options):
        seen.append((options["steps"], options["eps_step"]))
        return real(model, x, y, **options)

    monkeypatch.setitem(_adversarial.ATTACKS, "pgd", recording)
    x, y = data()
    est = boosted({"attack": "pgd", "eps": 0.35, "clip_values": (-5.0, 5.0), "mode": mode}).fit(x, y)
    assert len(est.estimators_) == 2 and seen and all(s == (7, pytest.approx(0.125)) for s in seen)


def test_a_loaded_fit_keeps_why_boosting_stopped(tmp_path):
    x, y = data()
    est = boosted({**PGD, "eps": 3.0}, lambda: learner(keras.Sequential)).set_params(n_estimators=4)
    est.fit(x, y)
    est.save(tmp_path / "fit")
    loaded = gradkit.load(tmp_path / "fit")
    assert loaded.stop_reason_ == est.stop_reason_
    assert (est.stop_reason_ is None) == (len(est.estimators_) == 4)


def test_adversarial_rounds_train_on_clean_plus_attacked_copies():
    attacks = pytest.importorskip("gradkit.attacks")
    seen = []

    class Recording(keras.Sequential):
        def fit(self, x=None, y=None, sample_weight=None, **kwargs):
            seen.append((np.array(x), np.array(sample_weight), self.get_weights()))
            return super().fit(x, y, sample_weight=sample_weight, **kwargs)

    def build():
        model = Recording(
            [keras.Input((2,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss=loss, run_eagerly=True)
        return model

    rng = np.random.RandomState(0)
    y = np.arange(60) % 3
    x = (np.array([[0.0, 0.0], [2.5, 0.0], [0.0, 2.5]])[y] + rng.randn(60, 2) * 0.8).astype("float32")
    est = SAMME(
        build,
        n_estimators=2,
        fit_kwargs={"epochs": 5, "batch_size": 16},
        random_state=0,
        verbose=0,
        adversarial={"attack": "fgsm", "eps": 0.1},
    ).fit(x, y)
    assert len(est.estimators_) == 2 and [len(s[0]) for s in seen] == [60, 120, 120]  # round 0 fits twice
    for xs, sw, _ in seen[1:]:
        np.testing.assert_array_equal(xs[:60], x)
        np.testing.assert_array_equal(sw[:60], sw[60:])  # the copy of sample i carries w_i
        assert np.abs(xs[60:] - x).max() == pytest.approx(0.1, abs=1e-6)
    first = build()  # round 0 attacks its own learner as it was after the clean fit
    first.set_weights(seen[1][2])
    np.testing.assert_array_equal(seen[1][0][60:], attacks.fgsm(first, x, y, eps=0.1))
    ensemble_so_far = gradkit.WeightedEnsemble(est.estimators_[:1], est.estimator_weights_[:1])
    np.testing.assert_array_equal(seen[2][0][60:], attacks.fgsm(ensemble_so_far, x, y, eps=0.1))


def _separable(n=120, seed=0):
    """Two classes on a line, apart by a gap 0.4..0.6 (a perfect clean fit), as two identical features."""
    rng = np.random.RandomState(seed)
    y = np.arange(n) % 2
    t = np.where(y == 0, rng.uniform(0.0, 0.4, n), rng.uniform(0.6, 1.0, n)).astype(np.float32)
    return np.stack([t, t], axis=1), y


def _linear():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(keras.optimizers.Adam(0.1), "sparse_categorical_crossentropy")
    return model


@pytest.mark.slow
def test_adversarial_rounds_are_judged_on_their_adversarial_examples():
    x, y = _separable()
    options = {"n_estimators": 2, "fit_kwargs": {"epochs": 40, "verbose": 0}, "random_state": 0, "verbose": 0}
    clean = gradkit.AdaBoostM1(_linear, **options).fit(x, y)
    assert len(clean.estimators_) == 1 and clean.stop_reason_ == "round 1 perfect (weighted error 0)"
    adversarial = {"attack": "pgd", "eps": 0.15, "steps": 5, "eps_step": 0.075, "clip_values": (0, 1)}
    robust = gradkit.AdaBoostM1(_linear, adversarial=adversarial, **options).fit(x, y)
    member = robust.estimators_[0]
    assert np.mean(member.predict(x, verbose=0).argmax(1) == y) == 1.0  # perfect on clean data ...
    assert 0 < robust.estimator_errors_[0] < 0.5  # ... yet the round's error counts its PGD examples
    # so boosting went on to round 2 (which a linear learner may fail: then the reason says so)
    assert len(robust.estimators_) == 2 or robust.stop_reason_.startswith("round 2 worse than random")
