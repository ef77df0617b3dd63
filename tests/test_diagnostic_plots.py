"""`gradkit.plot_training_diagnostics` (`gradkit._diagnostic_plots`): a panel per group of the diagnostics
in a History, or a panel per model; bad input refused."""

import keras
import pytest

import gradkit
from gradkit.monitor import GradientNormCallback
from helpers.training import X, Y, mlp


def test_plot_training_diagnostics_draws_a_panel_per_group(tmp_path):
    from matplotlib.image import imread

    model = mlp(keras.optimizers.SGD(0.1, global_clipnorm=0.5))
    callback = GradientNormCallback(per_layer=True, include="all")
    history = model.fit(X, Y, batch_size=4, epochs=3, verbose=0, callbacks=[callback])
    path = gradkit.plot_training_diagnostics(history, tmp_path / "diag.png", title="mlp")
    assert path == str(tmp_path / "diag.png")
    image = imread(path)
    assert image.shape[0] == 4 * 320 and image.shape[1] == 1100  # 8 panels: 4 rows of 2
    gradkit.plot_training_diagnostics({"grad_norm": [1.0, 2.0]}, tmp_path / "one.png")
    with pytest.raises(ValueError, match="`history` has no training diagnostics"):
        gradkit.plot_training_diagnostics({"loss": [1.0]}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="`clip_threshold` must be a number > 0"):
        gradkit.plot_training_diagnostics(history, tmp_path / "x.png", clip_threshold=0)
    with pytest.raises(ValueError, match="`path` must be a .png file name"):
        gradkit.plot_training_diagnostics(history, tmp_path / "x.pdf")


def test_plot_training_diagnostics_draws_a_panel_per_model(tmp_path):
    from matplotlib.image import imread

    models = {
        "single": {"grad_norm": [1.0, 0.5, 0.2], "grad_norm/dense": [0.8, 0.4, 0.1]},
        "adv_single": {"grad_norm": [2.0, 1.0, 0.5]},
        "adaboost_m1": [{"grad_norm": [1.0, 0.5]}, {"grad_norm": [0.9, 0.3]}],  # members end to end
    }
    path = gradkit.plot_training_diagnostics(models, tmp_path / "models.png", title="study")
    assert imread(path).shape[:2] == (2 * 320, 1100)  # 3 panels: 2 rows of 2
