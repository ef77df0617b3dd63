"""AdaBoost.M1 and SAMME (`gradkit.boosting._adaboost`, the loop of `_base`): learner weights and stopping
rules on deterministic stub learners, Keras learners honouring sample weights, scikit-learn agreement,
staged output, errors, ensembles."""

import math

import keras
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.ensemble import AdaBoostClassifier
from sklearn.exceptions import NotFittedError
from sklearn.tree import DecisionTreeClassifier

import gradkit
from gradkit.boosting import SAMME, AdaBoostM1
from gradkit.errors import WorseThanRandomError

# gradients' private cache: the seam that shows the one compiled gradient a booster's attacks share
from gradkit.gradients._cache import cached_values


class Stub:
    """Deterministic learner: right exactly on the samples in `right` (x holds the sample index)."""

    def __init__(self, right, n_classes, log):
        self.right, self.n_classes, self.log = np.asarray(right, bool), n_classes, log

    def fit(self, x, y, sample_weight=None):
        self.y = np.asarray(y)
        self.log.append(np.asarray(sample_weight, np.float64))
        return self

    def predict(self, x):
        idx = np.asarray(x)[:, 0].astype(int)
        return np.where(self.right[idx], self.y[idx], (self.y[idx] + 1) % self.n_classes)


def stub_fn(masks, n_classes, log):
    masks = iter(masks)
    return lambda: Stub(next(masks), n_classes, log)


def right_on(indices, n=10):
    mask = np.zeros(n, bool)
    mask[list(indices)] = True
    return mask


X10 = np.arange(10, dtype=np.float64)[:, None]
Y3 = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])


def test_samme_keeps_error_06_then_discards_worse_than_random():
    log = []
    est = SAMME(stub_fn([right_on(range(4)), right_on(range(3))], 3, log), n_estimators=5, verbose=0)
    est.fit(X10, Y3)
    np.testing.assert_allclose(est.estimator_errors_, [0.6], rtol=1e-12)
    np.testing.assert_allclose(est.estimator_weights_, [math.log(4 / 3)], rtol=1e-12)
    assert est.estimator_weights_[0] == pytest.approx(0.287682, abs=1e-6)
    assert len(est.estimators_) == 1  # the 0.75-error learner of round 2 was discarded
    # Round 1 weights reach the learner scaled to mean 1; misclassified ones then grow by exp(alpha) = 4/3
    # and all are renormalized: right 1/12, wrong 1/9 of the total, times n = 10 for the learner.
    np.testing.assert_allclose(log[0], np.ones(10), rtol=1e-12)
    np.testing.assert_allclose(log[1], np.where(right_on(range(4)), 10 / 12, 10 / 9), rtol=1e-12)
    assert log[1].mean() == pytest.approx(1.0, rel=1e-12)


def test_first_round_worse_than_random_raises():
    with pytest.raises(WorseThanRandomError, match="worse than random"):  # a ValueError
        SAMME(stub_fn([right_on(range(3))], 3, []), verbose=0).fit(X10, Y3)  # 0.7 >= 1 - 1/3
    with pytest.raises(ValueError, match="worse than random"):
        AdaBoostM1(stub_fn([right_on(range(4))], 3, []), verbose=0).fit(X10, Y3)  # 0.6 >= 1/2


def test_adaboost_m1_stops_at_half_and_keeps_earlier_rounds():
    masks = [right_on(range(6)), right_on([6, 7, 8])]  # errors 0.4, then 6/12 + 1/8 = 0.625
    est = AdaBoostM1(stub_fn(masks, 3, []), n_estimators=4, verbose=0).fit(X10, Y3)
    np.testing.assert_allclose(est.estimator_errors_, [0.4], rtol=1e-12)
    np.testing.assert_allclose(est.estimator_weights_, [math.log(0.6 / 0.4)], rtol=1e-12)
    assert len(est.estimators_) == 1


def test_two_classes_both_give_log_odds():
    y2 = Y3 % 2
    masks = [right_on(range(7)), right_on(range(3, 10))]
    fits = [cls(stub_fn(masks, 2, []), n_estimators=2, verbose=0).fit(X10, y2) for cls in (SAMME, AdaBoostM1)]
    np.testing.assert_array_equal(fits[0].estimator_weights_, fits[1].estimator_weights_)
    assert fits[0].estimator_weights_[0] == pytest.approx(math.log(0.7 / 0.3), rel=1e-12)


@pytest.mark.parametrize("cls", [SAMME, AdaBoostM1])
def test_perfect_round_has_finite_weight_and_stops(cls):
    masks = [right_on(range(8)), right_on(range(10)), right_on(range(5))]
    est = cls(stub_fn(masks, 3, []), n_estimators=3, verbose=0).fit(X10, Y3)
    assert est.estimator_errors_[-1] == 0.0 and est.estimator_weights_[-1] == 1.0
    assert len(est.estimators_) == 2 and np.all(np.isfinite(est.estimator_weights_))
    assert np.all(np.isfinite(est.predict_proba(X10)))


def blobs(n_classes=3, n=150, seed=0, spread=2.0):
    rng = np.random.RandomState(seed)
    centers = rng.randn(n_classes, 2) * spread
    y = np.arange(n) % n_classes
    return (centers[y] + rng.randn(n, 2)).astype(np.float64), y


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # sklearn's log of zero weights
@pytest.mark.parametrize("n_classes,learning_rate", [(3, 1.0), (3, 0.5), (2, 1.0)])
def test_samme_equals_scikit_learn(n_classes, learning_rate):
    x, y = blobs(n_classes, spread=1.0)
    labels = np.array(["ant", "bee", "cat"])[y]  # classes_ ordering follows np.unique, as in sklearn
    sw = np.random.RandomState(1).uniform(0.5, 2.0, len(y))
    sw[::10] = 0.0  # zero weights stay zero, the others are clipped at machine epsilon, as in sklearn
    ours = SAMME(
        lambda: DecisionTreeClassifier(max_depth=1), n_estimators=8, learning_rate=learning_rate, verbose=0
    ).fit(x, labels, sample_weight=sw)
    ref = AdaBoostClassifier(
        DecisionTreeClassifier(max_depth=1), n_estimators=8, learning_rate=learning_rate, random_state=0
    ).fit(x, labels, sample_weight=sw)
    assert len(ref.estimators_) == len(ours.estimators_) == 8
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    np.testing.assert_allclose(ours.estimator_weights_, ref.estimator_weights_, rtol=1e-12, atol=0)
    np.testing.assert_allclose(ours.estimator_errors_, ref.estimator_errors_, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(ours.predict(x), ref.predict(x))
    np.testing.assert_allclose(ours.decision_function(x), ref.decision_function(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), rtol=1e-12, atol=1e-15)
    for a, b in zip(ours.staged_predict(x), ref.staged_predict(x), strict=True):
        np.testing.assert_array_equal(a, b)
    assert ours.score(x, labels) == ref.score(x, labels)


def test_staged_predict_and_score():
    x, y = blobs(3, spread=1.0)
    est = SAMME(lambda: DecisionTreeClassifier(max_depth=1), n_estimators=5, verbose=0).fit(x, y)
    staged = list(est.staged_predict(x))
    np.testing.assert_array_equal(staged[-1], est.predict(x))
    scores = list(est.staged_score(x, y))
    assert len(scores) == len(staged) == len(est.estimators_) == 5
    assert scores == [np.mean(p == y) for p in staged] and scores[-1] == est.score(x, y)


def test_verbose_one_line_per_round(capsys):
    SAMME(lambda: DecisionTreeClassifier(max_depth=1), n_estimators=3, verbose=1).fit(*blobs(3, spread=1.0))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all("error:" in s and "alpha:" in s and s.endswith("s") for s in lines)
    SAMME(lambda: DecisionTreeClassifier(max_depth=1), n_estimators=3, verbose=0).fit(*blobs(3, spread=1.0))
    assert capsys.readouterr().out == ""


def test_params_and_clone():
    est = SAMME(DecisionTreeClassifier, n_estimators=3, learning_rate=0.5, verbose=0)
    assert est.get_params()["learning_rate"] == 0.5 and "learning_rate" not in AdaBoostM1(None).get_params()
    twin = clone(est.set_params(n_estimators=4))
    assert twin.get_params() == est.get_params() and twin.n_estimators == 4


def sigmoid_learner(epochs=5):
    def build():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy")
        return model

    return build


def test_keras_learner_honours_sample_weights():
    x, y = blobs(2, n=200, seed=3, spread=0.0)
    x[:, 0] += np.where(y == 0, -0.7, 0.7)  # two overlapping blobs along the first axis
    w = np.where(y == 0, 10.0, 1.0)  # weights concentrated on class 0
    kwargs = {"epochs": 5, "batch_size": 20}
    est = SAMME(sigmoid_learner(), n_estimators=1, fit_kwargs=kwargs, random_state=0, verbose=0)
    est.fit(x, y, sample_weight=w)
    pred = est.estimators_[0].predict(x, verbose=0)[:, 0] > 0.5
    weighted_error = np.sum(w * (pred != y)) / np.sum(w)  # normalized weights
    assert est.estimator_errors_[0] == pytest.approx(weighted_error, rel=1e-9)
    keras.utils.set_random_seed(0)
    plain = sigmoid_learner()()
    plain.fit(x, y.astype("float32"), epochs=5, batch_size=20, verbose=0)
    plain_error = np.sum(w * ((plain.predict(x, verbose=0)[:, 0] > 0.5) != y)) / np.sum(w)
    assert weighted_error < plain_error - 0.02
    np.testing.assert_array_equal(est.predict(x), pred.astype(int))


def test_learner_without_sample_weight_is_refused_before_training():
    calls = []

    class NoWeights:
        def fit(self, x, y):
            calls.append(1)

        def predict(self, x):
            return np.zeros(len(x), int)

    with pytest.raises(TypeError, match="sample_weight"):
        AdaBoostM1(NoWeights, verbose=0).fit(X10, Y3)
    assert calls == []


def uncompiled():
    return keras.Sequential([keras.Input((1,)), keras.layers.Dense(3, activation="softmax")])


def no_loss():
    model = uncompiled()
    model.compile(optimizer="sgd")
    return model


def three_units():
    model = uncompiled()
    model.compile(loss="sparse_categorical_crossentropy")
    return model


@pytest.mark.parametrize(
    "kwargs,y,error,match",
    [
        ({"n_estimators": 0}, Y3, ValueError, "n_estimators"),
        ({"n_estimators": 2.5}, Y3, ValueError, "n_estimators"),
        ({"learning_rate": 0.0}, Y3, ValueError, "learning_rate"),
        ({"learning_rate": -1.0}, Y3, ValueError, "learning_rate"),
        ({"build_fn": 3}, Y3, TypeError, "build_fn"),
        ({"build_fn": lambda: 3}, Y3, TypeError, "build_fn"),
        ({"build_fn": three_units()}, Y3, TypeError, "build_fn` must be a function .* not a model"),
        ({"build_fn": uncompiled}, Y3, ValueError, "compiled"),
        ({"build_fn": no_loss}, Y3, ValueError, "loss"),
        ({"build_fn": three_units}, Y3 % 2, ValueError, "3 output units"),
        ({}, np.zeros(10), ValueError, "two classes"),
        ({}, Y3[:5], ValueError, "shape"),
        ({"fit_kwargs": {"sample_weight": 1}}, Y3, ValueError, "fit_kwargs"),
        ({"fit_kwargs": {"class_weight": {0: 2.0}}}, Y3, ValueError, "fit_kwargs.*class_weight"),
        ({"fit_kwargs": {"validation_split": 0.2}}, Y3, ValueError, "validation_data instead"),
        ({"random_state": -1}, Y3, ValueError, "random_state"),
        ({"adversarial": {"attack": "cw", "eps": 0.1}}, Y3, ValueError, "adversarial"),
        ({"adversarial": {"attack": "fgsm", "eps": -0.1}}, Y3, ValueError, "eps"),
        ({"adversarial": {"attack": "fgsm", "eps": 0.1}}, Y3, TypeError, "Keras"),
        ({"checkpoint_dir": "unused"}, Y3, TypeError, "Keras"),
    ],
)
def test_bad_input_fails_before_training(kwargs, y, error, match):
    params = {"build_fn": lambda: DecisionTreeClassifier(max_depth=1), "verbose": 0, **kwargs}
    with pytest.raises(error, match=match):
        SAMME(**params).fit(X10, y)


def test_bad_sample_weight_and_unfitted():
    est = SAMME(lambda: DecisionTreeClassifier(max_depth=1), verbose=0)
    for sw in (np.zeros(10), -np.ones(10), np.ones(3)):
        with pytest.raises(ValueError, match="sample_weight"):
            est.fit(X10, Y3, sample_weight=sw)
    with pytest.raises(NotFittedError):
        est.predict(X10)
    with pytest.raises(TypeError, match="Keras"):
        est.fit(X10, Y3).as_ensemble()


def softmax_learner():
    model = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy", run_eagerly=True
    )
    return model


def test_as_ensemble_works_with_input_gradient():
    x, y = blobs(3, n=60, spread=1.0)
    x = x.astype("float32")
    est = SAMME(
        softmax_learner, n_estimators=2, fit_kwargs={"epochs": 2, "batch_size": 32}, random_state=0, verbose=0
    ).fit(x, y)
    ens = est.as_ensemble()
    assert isinstance(ens, gradkit.WeightedEnsemble) and ens.weights == tuple(est.estimator_weights_)
    np.testing.assert_array_equal(ens.predict(x), est.predict(x))
    with pytest.raises(ValueError, match="feature shape"):  # checked before the members predict
        est.predict(x[:, :1])
    grad = gradkit.input_gradient(ens, x[:8], y[:8])
    assert grad.shape == (8, 2) and np.all(np.isfinite(grad)) and np.abs(grad).max() > 0
    np.testing.assert_allclose(grad, analytic_gradient(ens, x[:8], y[:8]), rtol=1e-4, atol=1e-6)


def analytic_gradient(ens, x, y):
    """sum_k alpha_k d CE(y, softmax(tanh(x W1 + b1) W2 + b2)) / dx, in float64 numpy."""
    total = 0.0
    for model, alpha in zip(ens.models, ens.weights):
        w1, b1, w2, b2 = [np.asarray(v, np.float64) for v in model.get_weights()]
        h = np.tanh(x @ w1 + b1)
        z = h @ w2 + b2
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        dz = p - np.eye(3)[y]
        total = total + alpha * (((dz @ w2.T) * (1 - h**2)) @ w1.T)
    return total


def test_attacks_on_a_booster_share_one_compiled_gradient():
    rng = np.random.RandomState(0)
    x = rng.rand(40, 2).astype("float32")
    y = (x[:, 0] > x[:, 1]).astype(int)

    def build():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
        model.compile(keras.optimizers.Adam(0.1), "sparse_categorical_crossentropy", run_eagerly=True)
        return model

    booster = gradkit.AdaBoostM1(build, n_estimators=2, fit_kwargs={"epochs": 10}, random_state=0, verbose=0)
    booster.fit(x, y)
    assert booster.as_ensemble() is booster.as_ensemble()
    curve = gradkit.robustness_curve(
        booster, x, y, attack="fgsm", epsilons=[0.0, 0.05, 0.1], clip_values=(0, 1)
    )
    assert len(curve["accuracy"]) == 3
    fn = cached_values(booster.as_ensemble())[0]
    assert fn.trace_count == 1


def test_one_hot_labels_are_class_ids_and_a_keras_file_points_to_keras_loader(tmp_path):
    x = np.random.RandomState(0).rand(40, 2).astype("float32")
    ids = (x[:, 0] > 0.5).astype(int)
    from gradkit.boosting._data import check_data

    _, got, classes, _ = check_data(x, np.eye(2)[ids], None)
    np.testing.assert_array_equal(classes[got], ids)
    with pytest.raises(ValueError, match="argmax"):
        check_data(x, np.full((40, 2), 0.5), None)
    with pytest.raises(ValueError, match="keras.saving.load_model"):
        gradkit.load(tmp_path / "single.keras")


class ProbabilityLearner:
    """A scikit-learn-style learner whose `predict` returns probabilities `(n, 2)`, or P(class 1)."""

    def __init__(self, flat=False):
        self.flat, self.tree = flat, DecisionTreeClassifier(max_depth=1)

    def fit(self, x, y, sample_weight=None):
        self.tree.fit(x, y, sample_weight=sample_weight)
        return self

    def predict(self, x):
        proba = self.tree.predict_proba(x) * 0.9 + 0.05
        return proba[:, 1] if self.flat else proba


@pytest.mark.parametrize("cls", [SAMME, AdaBoostM1])
@pytest.mark.parametrize(
    "flat,match", [(False, r"shape \(150,\) \(class probabilities"), (True, "not probab")]
)
def test_learner_predicting_probabilities_is_refused_naming_predict(cls, flat, match):
    x, y = blobs(2, spread=1.0)
    with pytest.raises(ValueError, match=f"`predict`.*{match}"):
        cls(lambda: ProbabilityLearner(flat), n_estimators=3, verbose=0).fit(x, y)


def sklearn_seeds(n, random_state=0):
    """The seeds AdaBoostClassifier(random_state=0) gives its trees, one per round, in order."""
    rng = np.random.RandomState(random_state)
    return iter([rng.randint(np.iinfo(np.int32).max) for _ in range(n)])


def test_samme_equals_scikit_learn_exactly_on_iris_with_seeded_stumps():
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    seeds = sklearn_seeds(30)
    ours = SAMME(
        lambda: DecisionTreeClassifier(max_depth=1, random_state=next(seeds)),
        n_estimators=30,
        learning_rate=3.0,
        verbose=0,
    ).fit(x, y)
    ref = AdaBoostClassifier(
        DecisionTreeClassifier(max_depth=1), n_estimators=30, learning_rate=3.0, random_state=0
    ).fit(x, y)
    assert len(ours.estimators_) == len(ref.estimators_)
    np.testing.assert_allclose(
        ours.estimator_weights_, ref.estimator_weights_[: len(ref)], rtol=0, atol=1e-10
    )
    np.testing.assert_array_equal(ours.predict(x), ref.predict(x))
    for a, b in zip(ours.estimators_, ref.estimators_, strict=True):  # the same splits, round by round
        assert (a.tree_.feature[0], a.tree_.threshold[0]) == (b.tree_.feature[0], b.tree_.threshold[0])


def test_samme_equals_scikit_learn_with_a_logistic_regression_learner():
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    ours = SAMME(lambda: LogisticRegression(C=0.05), n_estimators=10, verbose=0).fit(x, y)
    ref = AdaBoostClassifier(LogisticRegression(C=0.05), n_estimators=10, random_state=0).fit(x, y)
    assert len(ours.estimators_) == len(ref.estimators_)
    np.testing.assert_allclose(
        ours.estimator_weights_, ref.estimator_weights_[: len(ref)], rtol=0, atol=1e-10
    )
    np.testing.assert_array_equal(ours.predict(x), ref.predict(x))


def test_boosting_hands_a_class_name_loss_its_labels():
    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="SparseCategoricalCrossentropy")
        return model

    x = np.random.RandomState(0).randn(60, 4).astype("float32")
    y = x[:, :3].argmax(axis=1)  # the sparse loss gets ids (one-hot rows would fail in fit)
    est = SAMME(build, n_estimators=1, fit_kwargs={"epochs": 20}, random_state=0, verbose=0).fit(x, y)
    assert len(est.estimators_) == 1 and est.score(x, y) > 0.6
