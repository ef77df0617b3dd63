"""`gradkit study --seed 0 --deterministic` twice on one machine: byte-identical results.csv, per backend.

Each run is a fresh process (`python -m gradkit`), as a user would rerun the command, so the global state
that `--deterministic` turns on (TensorFlow's op determinism, `torch.use_deterministic_algorithms`)
never leaks into other tests. The data is a small stratified slice of digits saved as a .npz file, and
the two runs go side by side, so the test stays well under a minute on TensorFlow.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from gradkit import study

pytestmark = pytest.mark.slow


def _start(data, out):
    args = ["study", "--quick", "--seed", "0", "--deterministic", "--no-progress", "--dataset", str(data),
            "--model", "mlp", "--epochs", "2", "--epsilons", "0,0.1", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    return subprocess.Popen([sys.executable, "-m", "gradkit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def _finish(proc):
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-2000:]
    return stdout


def test_two_deterministic_runs_give_identical_results(tmp_path):
    small = study.subsample(study.load_digits(), 400, 60, seed=0)
    data = tmp_path / "small.npz"
    np.savez(data, x_train=small.x_train, y_train=small.y_train, x_test=small.x_test, y_test=small.y_test)
    runs = [_start(data, tmp_path / "a"), _start(data, tmp_path / "b")]  # side by side: two processes
    first, second = (_finish(proc) for proc in runs)
    csv_a, csv_b = ((tmp_path / run / "results.csv").read_bytes() for run in ("a", "b"))
    assert csv_a == csv_b and len(csv_a.splitlines()) > 4 * 2 * 3  # header, models x eps x rows
    assert first.replace(str(tmp_path / "a"), "") == second.replace(str(tmp_path / "b"), "")  # the table too
    config = study.make_config(quick=True, deterministic=True)
    assert config["deterministic"] is True and study.make_config()["deterministic"] is False
