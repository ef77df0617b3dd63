"""Models that are not classifiers are refused by every classifier entry point, before any work: an output
that is not one score per class (a spatial map), a one-unit output trained as a regression, several units
without a softmax trained as a regression (regression heads). A softmax classifier compiled with a
regression loss on C >= 2 units is attacked through its cross-entropy (APGD-CE, `evaluate`) with class-id
labels, and its argmax decides."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.gradients import predict_classes

SPATIAL = "gives one score per class, shaped (batch, n_classes)"
REGRESSION = "compiled with the regression loss 'mean_squared_error'"
HEADS = (
    "is compiled with the regression loss 'mean_squared_error' and ends in no softmax, so its values are 3"
)


def _spatial():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((6,)), keras.layers.Reshape((2, 3, 1)), keras.layers.Dense(3)])


def _regression():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    return model


def _regression_heads():
    """Three regression targets (several regression heads in one Dense(3)), trained with mse: 3 units
    that look like the scores of 3 classes, but their argmax decides nothing."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, name="dense")])
    model.compile(loss="mse")
    return model


CALLS = {
    "fgsm": lambda m, x, y: gradkit.fgsm(m, x, y, eps=0.1, clip_values=(0, 1)),
    "pgd": lambda m, x, y: gradkit.pgd(m, x, y, eps=0.1, eps_step=0.05, steps=2, clip_values=(0, 1)),
    "apgd": lambda m, x, y: gradkit.apgd(m, x, y, eps=0.1, steps=2, clip_values=(0, 1)),
    "square": lambda m, x, y: gradkit.square(m, x, y, eps=0.1, n_queries=5, clip_values=(0, 1)),
    "fmn": lambda m, x, y: gradkit.fmn(m, x, y, norm=2, steps=2, clip_values=(0, 1)),
    "evaluate": lambda m, x, y: gradkit.evaluate(m, x, y, eps=0.1, clip_values=(0, 1), steps=2, n_queries=5),
    "predict_classes": lambda m, x, y: predict_classes(m, x),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(
    "build, message", [(_spatial, SPATIAL), (_regression, REGRESSION), (_regression_heads, HEADS)]
)
def test_a_model_that_is_not_a_classifier_is_refused(call, build, message):
    x = np.random.default_rng(0).uniform(0, 1, (8, 6)).astype("float32")
    y = np.array([0, 1] * 4)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CALLS[call](build(), x, y)


def test_regression_heads_recompiled_as_the_message_says_are_evaluated_as_logits():
    x = np.random.default_rng(0).uniform(0, 1, (8, 6)).astype("float32")
    y = np.array([0, 1, 2, 0] * 2)
    model = _regression_heads()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    result = gradkit.evaluate(model, x, y, eps=0.1, clip_values=(0, 1), attacks=["fgsm"], verbose=0)
    assert result.clean_accuracy == np.mean(np.argmax(model.predict(x, verbose=0), axis=1) == y)


def test_a_softmax_classifier_compiled_with_mse_is_attacked_on_class_ids():
    """The compiled loss is a regression one; the objective's labels are class ids, success is the argmax."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(loss="mse")
    model.layers[0].set_weights([np.array([[4.0, -4.0], [0.0, 0.0]], "float32"), np.zeros(2, "float32")])
    x = np.array([[0.05, 0.5], [0.3, 0.5], [0.45, 0.5]], "float32")  # class 0 when x0 > 0: margin 8 * x0
    y = np.zeros(3, "int64")
    x_adv = gradkit.apgd(model, x, y, eps=0.1, steps=10, clip_values=(-1, 1))  # APGD-CE
    # The Linf worst case moves x0 down by 0.1: only the first row (x0 = 0.05) can cross 0.
    np.testing.assert_array_equal(predict_classes(model, x_adv), [1, 0, 0])
    assert np.abs(x_adv - x).max() <= 0.1 + 1e-6
    result = gradkit.evaluate(model, x, y, eps=0.1, clip_values=(-1, 1), steps=10, n_queries=20)
    np.testing.assert_array_equal(result.robust, [False, True, True])
