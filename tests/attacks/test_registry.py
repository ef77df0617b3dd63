"""The attacks by name (`gradkit.attacks.registry`): `run_attack` reports success on the model's real decision
rule and the costs; `decide` is the weighted hard vote, not the soft mean; the table's names, kinds and
norms are those the attacks take."""

import keras
import numpy as np

import gradkit
from gradkit.attacks import decide, run_attack
from helpers.models import linear


def test_run_attack_reports_success_on_the_real_decision_and_costs(digits_mlp):
    model, x, y = digits_mlp
    result = run_attack("apgd-ce", model, x, y, eps=0.1, clip_values=(0, 1), seed=0, steps=10)
    np.testing.assert_array_equal(result.success, decide(model, result.x_adv) != y)
    assert 0 < result.n_gradients <= len(x) * 11 + len(x) and result.zero_gradient.shape == (len(x),)
    assert not result.from_probabilities  # the softmax was removed: logits
    square = run_attack("square", model, x, y, eps=0.1, clip_values=(0, 1), seed=0, n_queries=20)
    assert square.n_gradients == 0 and len(x) <= square.n_forwards <= 20 * len(x) + 1


def test_the_vote_not_the_soft_mean_is_the_decision():
    # Member 0 (0.5) says class 0 with p = 0.55, members 1 and 2 (0.25 each) say class 1 with p = 0.99:
    # the soft mean picks class 1, the weighted hard vote ties 0.5 : 0.5 and goes to the lower id, 0.
    members = [linear([[0.0, 0.0], [0.0, 0.0]], [0.2, 0.0]), linear([[0, 0], [0, 0]], [0.0, 4.6]),
               linear([[0, 0], [0, 0]], [0.0, 4.6])]  # fmt: skip
    ens = gradkit.WeightedEnsemble(members, [0.5, 0.25, 0.25])
    x = np.full((3, 2), 0.5, "float32")
    assert ens.predict(x, voting="soft").tolist() == [1, 1, 1]
    assert decide(ens, x).tolist() == ens.predict(x).tolist() == [0, 0, 0]
    assert gradkit.evaluate(ens, x, [0, 0, 0], eps=0.0, attacks=["fgsm"], verbose=0).clean_accuracy == 1.0


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
