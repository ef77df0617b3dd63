"""Errors that point the way for a newcomer's first hour, on every backend; and what a first run of gradkit
imports and compiles for nothing (TensorFlow on the other backends, a retracing warning)."""

import keras
import numpy as np
import pytest

import gradkit


def mlp():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(loss="sparse_categorical_crossentropy")
    return model


def test_integer_images_get_the_conversion_with_the_users_name():
    x = np.random.RandomState(0).randint(0, 256, size=(5, 4)).astype("uint8")
    with pytest.raises(
        TypeError, match=r"`x` holds integers \(dtype uint8\).*x.astype\('float32'\) / 255"
    ) as err:
        gradkit.fgsm(mlp(), x, np.zeros(5, int), eps=0.1)
    assert "keras_tensor" not in str(err.value) and "Embedding" not in str(err.value)


def test_a_file_path_as_x_is_named_as_such():
    with pytest.raises(TypeError, match="not a string or file path"):
        gradkit.fgsm(mlp(), "data/x_test.npy", [0], eps=0.1)


def test_load_of_a_keras_file_points_to_keras():
    with pytest.raises(ValueError, match="keras.saving.load_model"):
        gradkit.load("run/single.keras")


def test_a_first_learner_worse_than_random_says_what_usually_causes_it():
    from sklearn.dummy import DummyClassifier

    x, y = np.random.RandomState(0).rand(30, 4).astype("float32"), np.arange(30) % 3
    booster = gradkit.AdaBoostM1(
        lambda: DummyClassifier(strategy="constant", constant=0), n_estimators=2, verbose=0
    )
    with pytest.raises(ValueError, match=r"worse than random.*divide by 255.*too few epochs"):
        booster.fit(x, y)


def test_no_tensorflow_on_the_other_backends():
    import subprocess
    import sys

    backend = keras.backend.backend()
    if backend == "tensorflow":
        pytest.skip("TensorFlow is the backend here")
    code = (
        "import sys, numpy as np, gradkit\n"
        "for name in gradkit.__all__: getattr(gradkit, name)\n"
        "import gradkit.study, gradkit.evaluation, gradkit.boosting, gradkit.plotting, keras\n"
        "def build():\n"
        "    m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation='softmax')])\n"
        "    m.compile('adam', 'sparse_categorical_crossentropy')\n"
        "    return m\n"
        "x = np.random.RandomState(0).rand(40, 2).astype('float32')\n"
        "gradkit.SAMME(build, n_estimators=2, fit_kwargs={'epochs': 1, 'verbose': 0}, random_state=0,\n"
        "              verbose=0).fit(x, (x[:, 0] > 0.5).astype(int))\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_gradkit_evaluate_imports_no_tensorflow_and_draws_no_initial_value(tmp_path):
    """Each process of `gradkit evaluate` (one per rank under torchrun or jax.distributed) paid for
    TensorFlow (under Keras' `get_config`, from the logits clone) and for the random initial values the
    model file replaces (JAX compiled them): neither any more."""
    import subprocess
    import sys

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.save(tmp_path / "m.keras")
    rng = np.random.RandomState(0)
    np.savez(tmp_path / "d.npz", x=rng.rand(8, 4).astype("float32"), y=np.arange(8) % 3)
    paths = [str(tmp_path / name) for name in ("m.keras", "d.npz", "out")]
    code = (
        "import sys, keras\n"
        "from keras.src.backend import random\n"
        "draws, load = [], keras.saving.load_model\n"
        "def counted(name, draw):\n"
        "    return lambda *a, **k: draws.append(name) or draw(*a, **k)\n"
        "def loading(*a, **k):\n"
        "    drawn = {name: getattr(random, name) for name in ('uniform', 'normal', 'truncated_normal')}\n"
        "    for name, draw in drawn.items():\n"
        "        setattr(random, name, counted(name, draw))\n"
        "    try:\n"
        "        return load(*a, **k)\n"
        "    finally:\n"
        "        for name, draw in drawn.items():\n"
        "            setattr(random, name, draw)\n"
        "keras.saving.load_model = loading\n"
        "from gradkit import cli\n"
        f"args = ['evaluate', {paths[0]!r}, {paths[1]!r}, '--eps', '0.1', '--attacks', 'apgd-ce',\n"
        f"        '--steps', '2', '--no-progress', '--out', {paths[2]!r}]\n"
        "assert cli.main(args) == 0\n"
        "print('tensorflow' in sys.modules, len(draws))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    imported, draws = out.stdout.split()[-2:]
    assert draws == "0"  # while loading: the Dense kernel's Glorot draw was skipped (the file replaces it)
    assert imported == str(keras.backend.backend() == "tensorflow")


def test_predicting_with_new_models_prints_no_retracing_warning(capfd):
    # boosting predicts with each new member; TensorFlow counts that as retracing after 5 models
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the retracing warning is TensorFlow's")
    from gradkit.gradients import predict_batched

    x = np.random.RandomState(0).rand(60, 4).astype("float32")
    for _ in range(8):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
        predict_batched(model, x)
    assert "retracing" not in capfd.readouterr().err


def test_a_text_file_named_npz_is_called_what_it_is(tmp_path):
    from gradkit.study import DatasetError, load_npz

    (tmp_path / "data.npz").write_text("hello\n")
    with pytest.raises(DatasetError, match="not a readable .npz file of numeric arrays: it is no zip") as err:
        load_npz(str(tmp_path / "data.npz"))
    assert "allow_pickle" not in str(err.value)
