"""`gradkit selftest`: the command line equals `gradkit.selftest`, exits 0 on PASS and 1 on FAIL (BPDA's
`--surrogate` turning the rounded model's FAIL into a PASS), and bad input exits 2 naming the flag."""

import json
import subprocess
import sys

import keras
import pytest

import gradkit
from gradkit import cli
from helpers import models

FAST = ["--n", "1", "--n-inner", "49", "--steps", "10", "--n-queries", "100", "--no-progress"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The least-squares digits classifier and its 8-bit rounded copy saved as .keras, 2 digits as .npz."""
    import numpy as np

    folder = tmp_path_factory.mktemp("selftest")
    linear, rounded, x, y = models.digits_linear()
    linear.save(folder / "linear.keras")
    rounded.save(folder / "rounded.keras")
    inputs = keras.Input((64,))
    keras.Model(inputs, keras.layers.Rescaling(2.0)(keras.layers.Dense(10)(inputs))).save(
        folder / "scaled.keras"
    )
    np.savez(folder / "digits.npz", x_test=x[:2], y_test=y[:2])
    return {name: str(folder / f"{name}.keras") for name in ("linear", "rounded", "scaled")} | {
        "data": str(folder / "digits.npz"),
        "x": x[:2],
        "y": y[:2],
    }


def _run(capsys, *args):
    code = cli.main(["selftest", *args])
    return code, capsys.readouterr()


def test_pass_exits_0_and_writes_what_gradkit_selftest_returns(capsys, files, tmp_path):
    code, seen = _run(capsys, files["linear"], files["data"], "--eps", "1/10", "--out", str(tmp_path), *FAST)
    assert code == 0, seen.err
    report = json.loads((tmp_path / "selftest.json").read_text())
    assert report["verdict"] == "PASS" and report["attack"] == "standard" and report["eps"] == 0.1
    assert "PASS: " in seen.out and f"wrote {tmp_path}/selftest.json (PASS)" in seen.out
    model = keras.saving.load_model(files["linear"])
    options = dict(clip_values=(0.0, 1.0), n_inner=49, steps=10, n_queries=100, batch_size=256, verbose=0)
    expected = gradkit.selftest(model, files["x"][:1], files["y"][:1], eps=0.1, **options)
    assert report["points"] == expected.to_dict()["points"]
    assert report["sources"] == {"model": files["linear"], "data": files["data"], "surrogate": None}


def test_a_missed_example_exits_1_and_the_identity_surrogate_turns_it_into_a_pass(capsys, files, tmp_path):
    args = [files["rounded"], files["data"], "--eps", "0.1", "--attack", "apgd-ce", *FAST]
    code, seen = _run(capsys, *args, "--out", str(tmp_path / "plain"))
    assert code == 1 and "FAIL: the attack missed" in seen.out
    assert json.loads((tmp_path / "plain" / "selftest.json").read_text())["success_rate"] == 0.0
    code, seen = _run(capsys, *args, "--surrogate", files["linear"], "--out", str(tmp_path / "bpda"))
    assert code == 0 and "PASS: " in seen.out, seen.err


@pytest.mark.parametrize(
    "change, message",
    [
        (["--eps", "0"], "`--eps` must be > 0"),
        (["--eps", "0.1,0.2"], "`--eps` must be one number. Received: --eps 0.1,0.2"),
        (["--attack", "nope"], "`--attack` must be"),
        (["--n-inner", "0"], "`--n-inner` must be an integer >= 1. Received: --n-inner=0"),
        (["--n", "0"], "`--n` must be an integer >= 1"),
        (["--clip-values", "0.5,1"], "`--clip-values` must hold the values of `DATA`'s x"),
        (
            ["--model", "scaled"],
            "`MODEL` must be a Sequential or Functional Keras model whose output is a Dense",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_flag_and_writes_nothing(capsys, files, tmp_path, change, message):
    model = files["linear"]
    if change[0] == "--model":
        model, change = files[change[1]], []
    args = [model, files["data"], "--eps", "0.1", *FAST, "--out", str(tmp_path / "out"), *change]
    code, seen = _run(capsys, *args)
    assert code == 2 and seen.err.startswith("gradkit selftest: error: ") and message in seen.err, seen.err
    assert not (tmp_path / "out").exists()


def test_help_imports_no_keras_and_no_backend():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gradkit", "selftest", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--n-inner" in proc.stdout and "1: FAIL" in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "gradkit.cli._selftest" in imported
    assert not [name for name in imported if name.split(".")[0] in {"keras", "tensorflow", "jax", "torch"}]
