"""Ensembles attacked and judged by their real decision rule (the weighted hard vote), on every backend."""

import keras
import numpy as np

import gradkit
from gradkit.attacks import decide

LOGITS_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def linear(kernel, bias):
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    model.set_weights([np.asarray(kernel, "float32"), np.asarray(bias, "float32")])
    model.compile(loss=LOGITS_CE)
    return model


def loud_ensemble():
    """Member 0 (weight 0.6) decides the vote: class 1 iff x0 > 0.5. Member 1 (z1 = 30 - 50 x0) is
    saturated on class 1, and its cross-entropy gradient is 50x larger and points the other way."""
    deciding = linear([[0.0, 1.0], [0.0, 0.0]], [0.0, -0.5])
    loud = linear([[0.0, -50.0], [0.0, 0.0]], [0.0, 30.0])
    return gradkit.WeightedEnsemble([deciding, loud], [0.6, 0.4])


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


def test_a_point_fooled_mid_run_keeps_the_fooling_example():
    # Linf PGD from x0 = 0.47 with steps of 0.05 on the deciding member alone: x0 = 0.52 fools it at
    # step 1 (class 1); the fooled point is returned even though later steps would only move on.
    ens = loud_ensemble()
    x, y = np.array([[0.47, 0.5]], "float32"), np.array([0])
    adv = gradkit.pgd(ens, x, y, eps=0.2, eps_step=0.05, steps=6, clip_values=(0, 1), random_start=False,
                      objective="vote_margin")  # fmt: skip
    np.testing.assert_allclose(adv, [[0.52, 0.5]], atol=1e-6)
