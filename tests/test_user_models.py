"""Models users bring (issue 28): one-unit binary heads, uncompiled classifiers, saturated softmax in
adversarial training, scaled logits, non-differentiable layers and curves that must not rise. Each test
has its hand value; they run on every backend."""

import warnings

import keras
import numpy as np
import pytest

import gradkit
from gradkit import study
from gradkit.attacks import run_attack
from gradkit.gradients import classes_from_outputs, predict_classes


def _diagonal_data():
    """T3-1: x uniform in [0.05, 0.95]^2, label 1 iff x0 > x1, 120 points of margin |x0 - x1| / 2 > 0.02."""
    x = np.random.RandomState(0).uniform(0.05, 0.95, (2000, 2)).astype("float32")
    x = x[np.abs(x[:, 0] - x[:, 1]) / 2 > 0.02][:120]
    return x, (x[:, 0] > x[:, 1]).astype("int32")


def _hand_accuracy(x, eps):
    """A linear model on the diagonal: the exact worst case under Linf eps (no clipping)."""
    return float(np.mean(np.abs(x[:, 0] - x[:, 1]) / 2 > eps))


def _binary_model(head, compiled=True):
    """Input(2) -> Dense(1) with kernel [[6], [-6]]: `head` "sigmoid" (probability), "logit" or
    "softmax" (the equivalent two-unit control)."""
    inp = keras.Input((2,))
    if head == "softmax":
        dense = keras.layers.Dense(2, activation="softmax")
        kernel, loss = np.array([[-3, 3], [3, -3]], "float32"), "sparse_categorical_crossentropy"
    else:
        dense = keras.layers.Dense(1, activation="sigmoid" if head == "sigmoid" else None)
        kernel = np.array([[6], [-6]], "float32")
        loss = keras.losses.BinaryCrossentropy(from_logits=head == "logit")
    model = keras.Model(inp, dense(inp))
    dense.set_weights([kernel, np.zeros(kernel.shape[1], "float32")])
    if compiled:
        model.compile(keras.optimizers.SGD(learning_rate=0.0), loss)
    return model


@pytest.mark.parametrize("head", ["sigmoid", "logit", "softmax"])
def test_overfitting_check_on_a_one_unit_head_reads_a_threshold(head):
    x, y = _diagonal_data()
    model = _binary_model(head)
    targets = y if head == "softmax" else y[:, None].astype("float32")
    for eps in (0.0, 0.1):
        check = gradkit.CatastrophicOverfittingCheck(x, y, eps=eps)
        model.fit(x, targets, epochs=1, batch_size=120, verbose=0, callbacks=[check])
        assert check.pgd_accuracies == [_hand_accuracy(x, eps)]
        assert check.fgsm_accuracies == [_hand_accuracy(x, eps)]
    assert _hand_accuracy(x, 0.0) == 1.0


@pytest.mark.parametrize("head", ["sigmoid", "logit"])
@pytest.mark.parametrize("compiled", [True, False])
def test_evaluate_curve_and_ensemble_on_a_one_unit_head(head, compiled):
    x, y = _diagonal_data()
    model = _binary_model(head, compiled)
    result = gradkit.evaluate(model, x, y, eps=0.1, attacks=["apgd-ce", "square"], n_queries=100, verbose=0)
    assert result.clean_accuracy == 1.0 and result.robust_accuracy == _hand_accuracy(x, 0.1)
    curve = gradkit.robustness_curve(model, x, y, attack="pgd", epsilons=[0.0, 0.1], steps=10)
    assert curve["accuracy"] == [1.0, _hand_accuracy(x, 0.1)]
    assert np.array_equal(gradkit.WeightedEnsemble([model, model]).predict(x), y)


def test_the_decision_rule_thresholds_one_unit_and_argmaxes_the_rest():
    assert classes_from_outputs(np.array([[0.2], [0.0], [-0.1]]), True).tolist() == [1, 0, 0]
    assert classes_from_outputs(np.array([[0.7], [0.5], [0.2]]), False).tolist() == [1, 0, 0]
    assert classes_from_outputs(np.array([[0.1, 0.3, 0.3], [2.0, 1.0, 0.0]]), True).tolist() == [1, 0]
    x, y = _diagonal_data()
    assert np.array_equal(predict_classes(_binary_model("logit", compiled=False), x), y)


class OpaqueBinary(keras.Model):
    """A subclassed one-unit model: gradkit cannot read whether it outputs a logit or a probability."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


def test_an_unreadable_one_unit_output_is_refused_with_its_name_and_shape():
    x, _ = _diagonal_data()
    model = OpaqueBinary()
    model(x[:1])
    with pytest.raises(ValueError, match=r"one-unit output .*shape \(120, 1\).*from_logits"):
        predict_classes(model, x)
    model.compile(loss=keras.losses.BinaryCrossentropy(from_logits=True))
    assert predict_classes(model, x).shape == (120,)


def _confident_softmax():
    rng = np.random.RandomState(0)
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(16, activation="tanh")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(hidden))
    for w in model.weights:
        w.assign((rng.randn(*w.shape) * 8).astype("float32"))
    x = rng.uniform(0, 1, (32, 6)).astype("float32")
    return model, x, np.asarray(model.predict(x, verbose=0)).argmax(1)


def test_adversarial_training_on_a_saturated_softmax_trains_on_the_examples_loss():
    """The inner attack goes through the logits: the loss `fit` trains on is the loss at the examples
    gradkit's PGD (same steps, no random start, last iterate) finds, not the clean loss."""
    model, x, y = _confident_softmax()
    model.compile(keras.optimizers.SGD(learning_rate=0.0), "sparse_categorical_crossentropy")
    clean = model.evaluate(x, y, verbose=0)
    gradkit.adversarial_training(model, eps=0.3, steps=10, random_start=False, clip_values=(0, 1))
    trained = model.train_on_batch(x, y)
    gradkit.untrack_adversarial_training(model)
    x_adv = gradkit.pgd(
        model, x, y, eps=0.3, eps_step=0.075, steps=10, random_start=False, keep="last", clip_values=(0, 1)
    )
    at_examples = model.evaluate(x_adv, y, verbose=0)
    assert clean < 0.05 and at_examples > 3.0
    np.testing.assert_allclose(trained, at_examples, rtol=1e-4)


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


def _bump_model():
    """1-D: class 1 (wrong) only in the band |x - 0.55| < 0.05, class 0 elsewhere; at x = 0.48 the
    cross-entropy gradient points into the band. FGSM at eps 0.07 lands in it, at 0.2 beyond it."""
    inp = keras.Input((1,))
    shift = keras.layers.Dense(1)
    square = keras.layers.Lambda(lambda t: keras.ops.square(t))
    head = keras.layers.Dense(2)
    model = keras.Model(inp, head(square(shift(inp))))
    shift.set_weights([np.ones((1, 1), "float32"), np.array([-0.55], "float32")])
    head.set_weights([np.array([[0.0, -100.0]], "float32"), np.array([0.0, 0.25], "float32")])
    return model


def test_a_curve_never_rises_and_says_when_the_attack_did():
    model = _bump_model()
    x, y = np.array([[0.48], [0.47]], "float32"), np.array([0, 0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve = gradkit.robustness_curve(model, x, y, attack="fgsm", epsilons=[0.2, 0.0, 0.07])
    assert curve["attack_accuracy"] == [1.0, 1.0, 0.0]  # FGSM alone: 0.0 at 0.07, 1.0 at 0.2
    assert curve["accuracy"] == [0.0, 1.0, 0.0]  # the 0.07 examples lie in the 0.2 ball
    assert any("failed at larger eps" in str(w.message) for w in caught)
    assert curve["zero_gradient_fraction"] == 0.0


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


def test_overfitting_check_refuses_bad_data_before_the_first_epoch():
    x, y = _diagonal_data()
    model = _binary_model("logit")
    check = gradkit.CatastrophicOverfittingCheck(x, y, eps=0.1, clip_values=(0.5, 1.0))
    epochs = []
    callbacks = [check, keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: epochs.append(e))]
    with pytest.raises(ValueError, match="clip_values"):
        model.fit(x, y[:, None].astype("float32"), epochs=1, verbose=0, callbacks=callbacks)
    assert epochs == []


def test_adversarial_training_refuses_several_inputs_or_outputs():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(4)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], [keras.layers.Dense(3, name="cls")(hidden), keras.layers.Dense(1)(hidden)])
    with pytest.raises(ValueError, match=r"one input and one output.*2 inputs \['a', 'b'\]"):
        gradkit.adversarial_training(model, eps=0.1)
    single = keras.Model(a, [keras.layers.Dense(3, name="c1")(a), keras.layers.Dense(2, name="c2")(a)])
    with pytest.raises(ValueError, match=r"2 outputs"):
        gradkit.adversarial_training(single, eps=0.1)


def test_pgd_judges_success_on_the_attacked_output():
    """Success is read on `output=`'s head, not on output 0."""
    inp = keras.Input((4,))
    first = keras.layers.Dense(3, name="first")(inp)
    second = keras.layers.Dense(3, name="second")(inp)
    model = keras.Model(inp, [first, second])
    x = np.random.RandomState(1).uniform(0, 1, (16, 4)).astype("float32")
    y = np.asarray(model.predict(x, verbose=0)[1]).argmax(1)
    attacked = run_attack("pgd", model, x, y, eps=1.0, steps=10, output="second")
    pred = np.asarray(model.predict(np.asarray(attacked.x_adv), verbose=0)[1]).argmax(1)
    np.testing.assert_array_equal(attacked.success, pred != y)


def test_study_refuses_apgd_t_on_three_classes_before_training(tmp_path):
    rng = np.random.RandomState(0)
    arrays = {
        "x_train": rng.rand(30, 4).astype("float32"),
        "y_train": np.arange(30) % 3,
        "x_test": rng.rand(9, 4).astype("float32"),
        "y_test": np.arange(9) % 3,
    }
    np.savez(tmp_path / "three.npz", **arrays)
    out = tmp_path / "out"
    config = {"dataset": str(tmp_path / "three.npz"), "model": "mlp", "attacks": ["apgd-t"], "out": str(out)}
    with pytest.raises(study.ConfigError, match="'apgd-t'.*at least 4 classes.*has 3"):
        gradkit.run_study(config)
    assert not out.exists() or not any(out.iterdir())


def test_study_header_says_when_the_standard_evaluation_skips_apgd_t():
    from gradkit.study import _table

    config = {"attacks": ["standard"], "apgd_steps": 10, "square_queries": 200}
    assert "apgd-ce, apgd-t, fab-t 10 steps, square 200" in _table._attacks(config, 10)
    three = _table._attacks(config, 3)
    assert "apgd-ce, fab-t 10 steps (apgd-t skipped: 3 classes), square 200" in three
    assert "apgd-ce 10 steps (apgd-t, fab-t skipped: 2 classes)" in _table._attacks(config, 2)
