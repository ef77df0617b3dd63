"""The one decision rule (`gradkit.gradients._decision`): a one-unit output is thresholded (at 0 for
a logit, 0.5 for a probability), the others argmaxed; a one-unit output it cannot read is refused."""

import keras
import numpy as np
import pytest

from gradkit.gradients import classes_from_outputs, predict_classes
from helpers.binary import binary_model, diagonal_data


def test_the_decision_rule_thresholds_one_unit_and_argmaxes_the_rest():
    assert classes_from_outputs(np.array([[0.2], [0.0], [-0.1]]), True).tolist() == [1, 0, 0]
    assert classes_from_outputs(np.array([[0.7], [0.5], [0.2]]), False).tolist() == [1, 0, 0]
    assert classes_from_outputs(np.array([[0.1, 0.3, 0.3], [2.0, 1.0, 0.0]]), True).tolist() == [1, 0]
    x, y = diagonal_data()
    assert np.array_equal(predict_classes(binary_model("logit", compiled=False), x), y)


class OpaqueBinary(keras.Model):
    """A subclassed one-unit model: gradkit cannot read whether it outputs a logit or a probability."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


def test_an_unreadable_one_unit_output_is_refused_with_its_name_and_shape():
    x, _ = diagonal_data()
    model = OpaqueBinary()
    model(x[:1])
    with pytest.raises(ValueError, match=r"one-unit output .*shape \(120, 1\).*from_logits"):
        predict_classes(model, x)
    model.compile(loss=keras.losses.BinaryCrossentropy(from_logits=True))
    assert predict_classes(model, x).shape == (120,)
