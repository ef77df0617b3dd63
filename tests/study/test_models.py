"""`gradkit study --model module:function` (`gradkit.study.build_model`, `gradkit.study._models`): the study
trains and attacks your network in all four roles."""

import json
import textwrap

import keras
import pytest

from gradkit import cli, study

NETWORK = textwrap.dedent(
    """
    import keras

    def build(input_shape, n_classes):
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                  keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(n_classes, activation="softmax")])
        model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        return model

    def uncompiled(input_shape, n_classes):
        return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(n_classes)])
    """
)


@pytest.fixture
def network(tmp_path, monkeypatch):
    (tmp_path / "my_network_30.py").write_text(NETWORK)
    monkeypatch.chdir(tmp_path)  # the function's module is found in the current folder
    return tmp_path


@pytest.mark.slow
def test_study_of_your_own_network(network, capsys):
    out = network / "run"
    args = ["--quick", "--n-estimators", "2", "--epochs", "2", "--epsilons", "0,0.1", "--attacks", "fgsm"]
    code = cli.main(["study", "--no-progress", "--model", "my_network_30:build", *args, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    table = capsys.readouterr().out
    assert "model my_network_30:build" in table
    results = json.loads((out / "results.json").read_text())
    n_params = keras.saving.load_model(out / "single.keras").count_params()
    assert n_params == 64 * 16 + 16 + 16 * 10 + 10  # digits: 8x8 inputs, 10 classes
    for name in study.MODELS:
        members = results["models"][name].get("members", 1)
        assert results["models"][name]["n_params"] == n_params * members, name


def test_a_function_that_returns_no_compiled_model_exits_2(network, capsys):
    out = network / "run"
    code = cli.main(
        ["study", "--quick", "--no-progress", "--model", "my_network_30:uncompiled", "--out", str(out)]
    )
    assert code == 2 and "must return a compiled keras.Model" in capsys.readouterr().err
    with pytest.raises(ValueError, match="must name an importable function"):
        study.build_model("my_network_30:missing", (8, 8, 1), 10)


def test_the_cnn_reads_the_datasets_channels_last_images_whatever_the_global_layout():
    """The study's images are (h, w, c): its "cnn" says channels_last itself, so a global
    `image_data_format("channels_first")` (set for ported PyTorch models) does not read (8, 8, 1) as 8
    channels of 8 x 1 pixels."""
    before = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        model = study.build_model("cnn", (8, 8, 1), 10)
    finally:
        keras.config.set_image_data_format(before)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert convs[0].kernel.shape == (3, 3, 1, 16)  # one input channel
    assert all(getattr(layer, "data_format", "channels_last") == "channels_last" for layer in model.layers
               if not isinstance(layer, keras.layers.Flatten))  # fmt: skip
