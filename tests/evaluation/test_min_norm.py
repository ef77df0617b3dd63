"""`gradkit.min_norm` (`gradkit.evaluation._min_norm`): the per-sample smallest norms, the examples and the
curve from one run, FAB among its attacks at the closed form of a linear model, bad input."""

import numpy as np
import pytest

import gradkit
from oracles.linear import X, curved, exact, labels, lp


def test_min_norm_norms_examples_and_curve():
    model = curved()
    y = labels(model)
    y[:2] = 1 - y[:2]  # two points misclassified clean: norm 0
    result = gradkit.min_norm(model, X, y, norm=2, attacks=("fmn", "ddn"), steps=100, clip_values=(0, 1))
    assert result.norms.dtype == np.float64 and result.norms.shape == (12,)
    assert (result.norms[:2] == 0).all() and list(result.best_attack[:2]) == ["clean", "clean"]
    np.testing.assert_allclose(result.norms[2:], exact(X[2:], y[2:], 2), rtol=0.01)
    np.testing.assert_allclose(lp(result.x_adv - X, 2), result.norms, rtol=1e-6, atol=1e-7)
    assert set(result.best_attack[2:]) <= {"fmn", "ddn"}
    eps = [0.0, 0.05, 0.1, 0.2, 0.4, 1.0]
    curve = result.curve(eps)
    assert curve == sorted(curve, reverse=True)
    assert curve == [float(np.mean(result.norms > e)) for e in eps] and curve[0] == 10 / 12
    through = gradkit.robustness_curve(model, X, y, attack="fmn", epsilons=eps, norm=2, steps=100,
                                       clip_values=(0, 1))  # fmt: skip
    fmn_only = gradkit.min_norm(model, X, y, norm=2, steps=100, clip_values=(0, 1))
    assert through["accuracy"] == fmn_only.curve(eps)


@pytest.mark.parametrize("norm", [2, np.inf, 1])
def test_fab_in_min_norm_reaches_the_closed_form_and_the_minimum_is_kept(norm):
    model = curved()
    y = labels(model)
    fab = gradkit.min_norm(model, X, y, norm=norm, attacks="fab", steps=30, clip_values=(0, 1))
    np.testing.assert_allclose(fab.norms, exact(X, y, norm), rtol=0.01)
    both = gradkit.min_norm(model, X, y, norm=norm, attacks=("fmn", "fab"), steps=30, clip_values=(0, 1))
    assert np.all(both.norms <= fab.norms) and set(both.best_attack) <= {"fmn", "fab"}
    np.testing.assert_allclose(lp(both.x_adv - X, norm), both.norms, rtol=1e-5)


def two_input_model():
    """Inputs a (3,) and b (2,) -> Concatenate -> Dense(3) logits."""
    import keras

    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    return keras.Model([a, b], keras.layers.Dense(3)(keras.layers.Concatenate()([a, b])))


SINGLE_INPUT_ENTRIES = {
    "min_norm": lambda m, x, y: gradkit.min_norm(m, x, y, norm=2, steps=2),
    "evaluate": lambda m, x, y: gradkit.evaluate(m, x, y, eps=0.1, verbose=0),
    "robustness_curve(attack='apgd')": lambda m, x, y: gradkit.robustness_curve(
        m, x, y, attack="apgd", epsilons=[0.1], steps=2
    ),
    "robustness_curve(attack='standard')": lambda m, x, y: gradkit.robustness_curve(
        m, x, y, attack="standard", epsilons=[0.1]
    ),
    "APGD": lambda m, x, y: gradkit.apgd(m, x, y, eps=0.1, steps=2),
    "Square": lambda m, x, y: gradkit.square(m, x, y, eps=0.1, n_queries=2),
    "FAB": lambda m, x, y: gradkit.fab(m, x, y, steps=2),
    "FMN": lambda m, x, y: gradkit.fmn(m, x, y, steps=2),
    "DDN": lambda m, x, y: gradkit.ddn(m, x, y, steps=2),
}


SEVERAL_INPUTS = ("evaluate", "APGD", "Square", "FAB", "FMN", "DDN")  # a list or dict x: one flat row


@pytest.mark.parametrize("entry", sorted(SINGLE_INPUT_ENTRIES))
def test_every_single_input_entry_refuses_a_two_input_model_in_the_same_words(entry):
    """min_norm and its siblings refuse several input arrays, or one array for a two-input model, with
    one TypeError that names the entry point and the way out (gradkit.pgd), before any work; never a
    raw numpy error ("setting an array element with a sequence"). The attacks and evaluate take
    several inputs as a list or dict (`gradkit.attacks.FlatInputs`), and still refuse one array."""
    model, rng = two_input_model(), np.random.default_rng(0)
    xa, xb, y = rng.uniform(0, 1, (4, 3)), rng.uniform(0, 1, (4, 2)), np.arange(4) % 3
    call, name = SINGLE_INPUT_ENTRIES[entry], entry.replace("(", r"\(").replace(")", r"\)")
    if entry == "evaluate":  # evaluate shows the one-input model to build instead (evaluation._single)
        with pytest.raises(ValueError, match="^`model` must have one input: evaluate attacks models of"):
            call(model, np.concatenate([xa, xb], axis=1), y)
    if entry in SEVERAL_INPUTS:
        for x in ([xa, xb], {"a": xa, "b": xb}):
            out = call(model, x, y)
            x_adv = out.x_adv if entry == "evaluate" else out
            assert [np.shape(v) for v in (x_adv.values() if isinstance(x, dict) else x_adv)] == [
                (4, 3),
                (4, 2),
            ]
        if entry == "evaluate":
            return
    several = rf"^`x` must be one array: {name} attacks single-input models\. Received: x of type "
    for x in [] if entry in SEVERAL_INPUTS else ([xa, xb], (xa, xb), {"a": xa, "b": xb}):
        with pytest.raises(
            TypeError, match=several + rf"{type(x).__name__} \(use gradkit.pgd for several inputs\)$"
        ):
            call(model, x, y)
    one = rf"^`model` must have one input: {name} attacks single-input models\. Received: a model with 2 "
    with pytest.raises(TypeError, match=one + r"inputs \['a', 'b'\] \(use gradkit.pgd for several inputs\)$"):
        call(model, np.concatenate([xa, xb], axis=1), y)
