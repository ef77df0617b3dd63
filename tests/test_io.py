"""Atomic writes (`gradkit._io`): whole files with the usual permissions, no temporary left, the old file
kept on failure."""

import os
import pathlib

import keras
import numpy as np
import pytest

import gradkit
from gradkit import _io as atomic
from gradkit._io import write_atomic

USUAL = 0o666 & ~0o027  # the umask the fixture sets


@pytest.fixture
def umask_027(monkeypatch):
    monkeypatch.setattr(atomic, "_UMASK", 0o027)  # as if the process umask were 027


def test_written_file_has_the_usual_permissions_and_no_temporary_stays(tmp_path, umask_027):
    path = tmp_path / "a.txt"
    write_atomic(str(path), lambda tmp: pathlib.Path(tmp).write_text("one"))
    assert path.read_text() == "one" and os.stat(path).st_mode & 0o777 == USUAL
    assert os.listdir(tmp_path) == ["a.txt"]


def test_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")

    def fail(tmp):
        pathlib.Path(tmp).write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(str(path), fail)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]


def learner():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def test_plots_and_saved_boosters_are_readable_by_others(tmp_path, umask_027):
    png = gradkit.plot_grad_norm({"grad_norm": [1.0, 0.5, 0.25]}, str(tmp_path / "g.png"))
    assert os.stat(png).st_mode & 0o777 == USUAL
    x = np.random.RandomState(0).rand(20, 2).astype(np.float32)
    est = gradkit.SAMME(learner, n_estimators=1, fit_kwargs={"epochs": 1}, random_state=0, verbose=0)
    est.fit(x, (x[:, 0] > 0.5).astype(int)).save(str(tmp_path / "boost"))
    names = sorted(os.listdir(tmp_path / "boost"))
    assert names[0] == "boost.json" and names[1].startswith("member_000_") and len(names) == 2
    assert all(os.stat(tmp_path / "boost" / name).st_mode & 0o777 == USUAL for name in names)
