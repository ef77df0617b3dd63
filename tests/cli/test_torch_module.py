"""`gradkit evaluate --torch-module module:function MODEL.pt DATA` (`gradkit.cli._torch_module`, `_inputs`):
on PyTorch it equals `gradkit.evaluate` on the same network written in Keras, point for point; elsewhere,
and for a state_dict without --torch-module, exit 2 with the fix named before Keras or torch is imported."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gradkit
from gradkit.cli import _torch_module
from helpers import torch_cnn
from helpers.cli import run_evaluate, samples

from conftest import BACKEND

on_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch.nn.Modules run on the PyTorch backend only")
SRC = str(pathlib.Path(gradkit.__file__).resolve().parents[1])
ATTACK = ["--steps", "5", "--n-queries", "20", "--no-progress"]
EVAL = dict(eps=0.05, steps=5, n_queries=20, clip_values=(0.0, 1.0), verbose=0)


_run, _samples = run_evaluate, samples


def _subprocess(code, tmp_path, **env):
    env = {**os.environ, "PYTHONPATH": SRC, **env}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_state_dict_without_torch_module_or_with_model_fn_exits_2_naming_the_flag(capsys, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "net.pt").write_bytes(b"")
    code, seen = _run(capsys, str(tmp_path / "net.pt"), "digits", "--eps", "0.1", "--out", str(out))
    assert code == 2 and "is a PyTorch state_dict: pass --torch-module module:function" in seen.err
    args = ["--torch-module", "net:build", "--model-fn", "net:build"]
    code, seen = _run(capsys, str(tmp_path / "net.pt"), "digits", "--eps", "0.1", *args, "--out", str(out))
    assert code == 2 and "`--torch-module` and `--model-fn` exclude each other" in seen.err
    assert not out.exists()


PROBE = """
import json, sys
from gradkit import cli
args = ["net.pt", "data.npz", "--torch-module", "net:build", "--eps", "0.1", "--out", "o"]
code = cli.main(["evaluate", *args])
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "keras": "keras" in sys.modules}))
"""


@pytest.mark.skipif(BACKEND == "torch", reason="the error is for the other backends")
def test_other_backends_exit_2_naming_keras_backend_torch_before_importing_keras_or_torch(tmp_path):
    got = _subprocess(PROBE, tmp_path, KERAS_BACKEND=BACKEND)
    assert got == {"code": 2, "torch": False, "keras": False}
    assert not (tmp_path / "o").exists()


def test_the_backend_is_read_as_keras_reads_it_without_importing_keras(tmp_path):
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax"}))
    code = "import json, sys; from gradkit.cli import _torch_module as t; "
    code += "print(json.dumps([t.keras_backend(), 'keras' in sys.modules]))"
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": SRC, "KERAS_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(done.stdout) == ["jax", False]
    assert _torch_module.keras_backend() == BACKEND  # Keras imported: its own answer


@pytest.fixture
def torch_files(tmp_path, monkeypatch):
    """The CNN's module file on sys.path, its state_dict `net.pt`, its data `test.npz`, and the net."""
    import torch

    (tmp_path / "tmp_torch_net.py").write_text(torch_cnn.SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    net = torch_cnn.torch_cnn()
    torch.save(net.state_dict(), tmp_path / "net.pt")
    x, y = torch_cnn.data(net)
    np.savez(tmp_path / "test.npz", x_test=x, y_test=y)
    return {"model": str(tmp_path / "net.pt"), "data": str(tmp_path / "test.npz"), "net": net, "x": x, "y": y}


@on_torch
def test_evaluate_torch_module_equals_the_keras_twin_point_for_point(capsys, torch_files, tmp_path):
    expected = gradkit.evaluate(
        torch_cnn.keras_twin(torch_files["net"]), torch_files["x"], torch_files["y"], **EVAL
    )
    assert expected.broken_by.count(None) not in (0, len(expected.broken_by))
    runs = {
        "state_dict": [torch_files["model"], "--torch-module", "tmp_torch_net:build"],
        "own weights": ["-", "--torch-module", "tmp_torch_net:build_seeded"],
    }
    for name, args in runs.items():
        out = tmp_path / name.replace(" ", "_")
        code, seen = _run(
            capsys,
            args[0],
            torch_files["data"],
            *args[1:],
            "--eps",
            "0.05",
            "--n-classes",
            "4",
            *ATTACK,
            "--out",
            str(out),
        )
        assert code == 0, seen.err
        rows = _samples(out)
        assert [r["broken_by"] or None for r in rows] == expected.broken_by, name
        assert [r["robust"] == "1" for r in rows] == expected.robust.tolist(), name
        report = json.loads((out / "evaluation.json").read_text())
        assert report["robust_accuracy"] == expected.robust_accuracy
        assert report["sources"]["torch_module"] == args[2]


@on_torch
def test_bad_torch_inputs_exit_2_naming_the_argument_and_write_nothing(capsys, torch_files, tmp_path):
    import torch

    out = tmp_path / "out"
    x = torch_files["x"]
    np.savez(tmp_path / "last.npz", x_test=x.transpose(0, 2, 3, 1), y_test=torch_files["y"])  # channels last
    torch.save(torch.nn.Linear(64, 4).state_dict(), tmp_path / "other.pt")
    net = ["--torch-module", "tmp_torch_net:build"]
    cases = [
        (
            ["-", str(tmp_path / "last.npz"), "--torch-module", "tmp_torch_net:build_seeded"],
            "`DATA's input shape`",
        ),
        (
            [torch_files["model"], torch_files["data"], "--torch-module", "tmp_torch_net:not_a_module"],
            "`--torch-module` must be a",
        ),
        (
            [torch_files["model"], torch_files["data"], "--torch-module", "nowhere:build"],
            "`--torch-module` names nothing",
        ),
        (
            [torch_files["model"], torch_files["data"], *net, "--n-classes", "4", "--model-fn", "x:y"],
            "exclude each other",
        ),
    ]
    for args, message in cases:
        code, seen = _run(capsys, *args, "--eps", "0.1", "--out", str(out))
        assert code == 2 and message in seen.err, (args, seen.err)
    assert set(torch_files["y"]) == {0, 1}  # DATA lacks classes 2 and 3: the net of 4 needs --n-classes
    for model, message in (
        (torch_files["model"], "built for input shape (1, 8, 8) and 2 classes: --n-classes sets the classes"),
        (str(tmp_path / "other.pt"), "`MODEL` must hold the weights of this module"),
        (str(tmp_path / "missing.pt"), "`MODEL` must be a state_dict file"),
    ):
        args = [model, torch_files["data"], "--torch-module", "tmp_torch_net:build", "--eps", "0.1"]
        code, seen = _run(capsys, *args, "--out", str(out))
        assert code == 2 and message in seen.err, (model, seen.err)
    assert not out.exists()


@on_torch
def test_a_model_fn_wrapping_a_module_without_output_shape_is_pointed_to_torch_module(capsys, tmp_path):
    (tmp_path / "tmp_wrapping_net.py").write_text(
        "import keras, torch\n"
        "def build():\n"
        "    inputs = keras.Input((6,))\n"
        "    return keras.Model(inputs, keras.layers.TorchModuleWrapper(torch.nn.Linear(6, 4))(inputs))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        np.savez(tmp_path / "d.npz", x=np.zeros((4, 6), "float32"), y=np.arange(4))
        (tmp_path / "w.weights.h5").write_bytes(b"")  # never read: the build fails first
        args = [str(tmp_path / "d.npz"), "--model-fn", "tmp_wrapping_net:build", "--eps", "0.1"]
        code, seen = _run(capsys, str(tmp_path / "w.weights.h5"), *args, "--out", str(tmp_path / "o"))
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 2 and "pass --torch-module tmp_wrapping_net:build instead" in seen.err, seen.err
