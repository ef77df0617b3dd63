"""Half precision: attacks and `evaluate` on `mixed_bfloat16` and `mixed_float16` models (the model's own
compute policy unchanged) keep their state and arithmetic in float32: bfloat16 and float32 evaluations of
a digits CNN agree, and no attack's state holds NaN or inf under float16."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.attacks import decide, recording
from gradkit.attacks.geometry import norms
from helpers import models

EPS = 0.1
ATTACKS = {  # name: (function, arguments, whether eps bounds the result in that norm)
    "fgsm": ("fgsm", dict(eps=EPS), np.inf),
    "pgd": ("pgd", dict(eps=EPS, eps_step=0.03, steps=5, seed=0), np.inf),
    "apgd-linf": ("apgd", dict(eps=EPS, steps=5, seed=0), np.inf),
    "apgd-l2": ("apgd", dict(eps=1.0, norm=2, steps=5, seed=0), 2),
    "apgd-l1": ("apgd", dict(eps=4.0, norm=1, steps=5, seed=0), 1),
    "apgd-dlr": ("apgd", dict(eps=EPS, loss="dlr", steps=5, seed=0), np.inf),
    "square": ("square", dict(eps=EPS, n_queries=20, seed=0), np.inf),
    "fab": ("fab", dict(steps=5), None),
    "fmn": ("fmn", dict(steps=5), None),
    "ddn": ("ddn", dict(steps=5), None),
}


@pytest.fixture(scope="module")
def digits():
    """A float32 digits CNN, its half-precision twins (same weights) and 200 held-out images."""
    model, x, y = models.digits_cnn(filters=8, n_train=600, epochs=3, n_test=200)
    twins = {}
    for policy in ("mixed_bfloat16", "mixed_float16"):  # the policy on the layers, as users set it
        twin = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Conv2D(8, 3, activation="relu", dtype=policy),
                keras.layers.Flatten(dtype=policy),
                keras.layers.Dense(10, dtype=policy),
            ]
        )
        twin.set_weights(model.get_weights())
        twins[policy] = twin
    return model, twins, x, y


def test_the_twins_compute_in_half_precision_and_take_float32_inputs(digits):
    _, twins, x, _ = digits
    for policy, dtype in (("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")):
        assert twins[policy].layers[0].compute_dtype == dtype
        assert str(twins[policy].predict(x[:2], verbose=0).dtype) == dtype


def test_bfloat16_and_float32_evaluations_agree(digits):
    model, twins, x, y = digits
    options = dict(eps=EPS, attacks=["apgd-ce"], steps=10, clip_values=(0, 1), verbose=0)
    full, half = (gradkit.evaluate(m, x, y, **options) for m in (model, twins["mixed_bfloat16"]))
    assert full.clean_accuracy > 0.8 and 0.05 < full.robust_accuracy < full.clean_accuracy  # not trivial
    assert abs(half.clean_accuracy - full.clean_accuracy) <= 0.01
    assert abs(half.robust_accuracy - full.robust_accuracy) <= 0.02
    assert half.x_adv.dtype == np.float32 and np.isfinite(half.x_adv).all()


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_on_a_float16_model_keeps_a_finite_state_inside_the_box(digits, name):
    _, twins, x, y = digits
    fn, kwargs, norm = ATTACKS[name]
    with recording() as record:
        x_adv = getattr(gradkit, fn)(twins["mixed_float16"], x[:16], y[:16], clip_values=(0, 1), **kwargs)
    assert x_adv.dtype == np.float32 and np.isfinite(x_adv).all()
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    if norm is not None:
        sizes = norms(x_adv.astype(np.float64) - x[:16], norm)
        assert sizes.max() <= kwargs["eps"] * (1 + 1e-5)
    if record.norms is not None:
        assert not np.isnan(record.norms).any()
    if name == "apgd-dlr":  # the objective reads the float16 logits in float32: DLR's ratio stays finite
        values, logits, grad = record.frame.objective(x[:16], y[:16].astype("int32"))
        assert logits.dtype == np.float32 and grad.dtype == np.float32 and np.isfinite(values).all()
    fooled = decide(twins["mixed_float16"], x_adv) != y[:16]
    assert fooled.mean() > 0.1  # the gradient (or the search) did not vanish in float16
