"""The README's Python examples run as written, on every backend."""

import pathlib
import re

import pytest

from conftest import BACKEND

README = str(pathlib.Path(__file__).resolve().parents[2] / "README.md")


@pytest.mark.slow
def test_readme_python_examples_run(tmp_path, monkeypatch):
    with open(README) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, README, "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["grad"].trace_count == (3 if BACKEND == "torch" else 1)  # as the README says
    assert namespace["x_adv"].shape == namespace["x"].shape
    assert (tmp_path / "grad_norm.png").stat().st_size > 1000
