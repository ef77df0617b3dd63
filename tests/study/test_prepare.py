"""The study's data checked against its attacks before any training or writing
(`gradkit.study._prepare`)."""

import numpy as np
import pytest

import gradkit
from gradkit import study


def test_study_refuses_apgd_t_on_three_classes_before_training(tmp_path):
    rng = np.random.RandomState(0)
    arrays = {
        "x_train": rng.rand(30, 4).astype("float32"),
        "y_train": np.arange(30) % 3,
        "x_test": rng.rand(9, 4).astype("float32"),
        "y_test": np.arange(9) % 3,
    }
    np.savez(tmp_path / "three.npz", **arrays)
    out = tmp_path / "out"
    config = {"dataset": str(tmp_path / "three.npz"), "model": "mlp", "attacks": ["apgd-t"], "out": str(out)}
    with pytest.raises(study.ConfigError, match="'apgd-t'.*at least 4 classes.*has 3"):
        gradkit.run_study(config)
    assert not out.exists() or not any(out.iterdir())
