"""`gradkit study --quick` end to end on digits, resume after interruptions, changed configurations.

One quick study runs per backend (module fixture); the resume tests work on copies of its directory
and stub out training where it is not the point. The quick study itself takes 40 s (TensorFlow) to
several minutes (JAX compiles every member's steps; PyTorch) on a busy 2-core machine, so every test
here is marked slow (`make test` runs them, `make test-fast` skips them).
"""

import csv
import json
import math
import os
import shutil

import keras
import numpy as np
import pytest

import gradkit
from gradkit import cli, evaluation, study
from gradkit.gradients import as_ensemble
from gradkit.study import _outdir, _run

BACKEND = keras.backend.backend()
FILES = {"config.json", "results.json", "results.csv", "robustness.png", "grad_norm.png", "single.keras",
         "adaboost_m1", "adv_boost"}  # fmt: skip
MODEL_KEYS = {"clean_accuracy", "n_params", "train_seconds"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "quick"
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 0
    return out


def _read(out, name="results.json"):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def _write(out, obj, name="results.json"):
    with open(os.path.join(out, name), "w") as f:
        json.dump(obj, f)


def _copy(src, tmp_path):
    return shutil.copytree(src, tmp_path / "run")


def _rows(state, model=None):
    return {
        (r["model"], r["attack"], r["eps"]): r["accuracy"]
        for r in state["results"]
        if model in (None, r["model"])
    }


def _no_training(monkeypatch, allowed=()):
    calls = []

    def forbid(name, *args):
        calls.append(name)
        if name not in allowed:
            raise AssertionError(f"{name} was trained again")
        return gradkit.load(allowed[name]), [1.0, 2.0]

    monkeypatch.setattr(_run, "_train_single", forbid)
    monkeypatch.setattr(_run, "_train_boosted", forbid)
    return calls


def test_files_and_results_schema(quick_dir):
    assert set(os.listdir(quick_dir)) == FILES  # no temporary files left behind
    for png in ("robustness.png", "grad_norm.png"):
        assert (quick_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    state = _read(quick_dir)
    assert list(state) == [
        "config",
        "backend",
        "dataset",
        "n_train",
        "n_test",
        "models",
        "results",
        "grad_norm",
    ]
    expected = study.make_config(quick=True)
    expected.pop("out")
    assert state["config"] == expected and _read(quick_dir, "config.json")["config"] == expected
    assert expected["epsilons"] == [0.0, 0.1, 0.3] and expected["n_estimators"] == 2
    assert (state["backend"], state["dataset"], state["n_train"], state["n_test"]) == (
        BACKEND,
        "digits",
        1347,
        450,
    )
    assert set(state["models"]) == {"single", "adaboost_m1", "adv_boost"}
    assert set(state["models"]["single"]) == MODEL_KEYS
    epochs = expected["epochs"]
    assert len(state["grad_norm"]["single"]) == epochs * 2  # as many epochs as the two members together
    for name, extra_fits in (("adaboost_m1", 0), ("adv_boost", 1)):
        record = state["models"][name]
        assert set(record) == MODEL_KEYS | {"estimator_weights"}
        weights = record["estimator_weights"]
        assert 1 <= len(weights) <= 2 and all(w > 0 for w in weights)
        assert len(state["grad_norm"][name]) == epochs * (len(weights) + extra_fits)
    for curve in state["grad_norm"].values():
        assert all(math.isfinite(v) and v > 0 for v in curve)
    assert len(state["results"]) == 3 * 2 * 3
    assert all(list(row) == ["model", "attack", "eps", "accuracy"] for row in state["results"])
    with open(quick_dir / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["attack"], float(r["eps"]), float(r["accuracy"])) for r in rows] == [
        tuple(r.values()) for r in state["results"]
    ]


def test_accuracy_clean_at_eps_zero_and_under_attack(quick_dir):
    state = _read(quick_dir)
    rows = _rows(state)
    for name, record in state["models"].items():
        clean = record["clean_accuracy"]
        assert clean >= 0.9, (name, clean)
        assert rows[name, "fgsm", 0.0] == clean and rows[name, "pgd", 0.0] == clean
        pgd = [rows[name, "pgd", e] for e in (0.0, 0.1, 0.3)]
        assert pgd == sorted(pgd, reverse=True), (name, pgd)
        assert rows[name, "pgd", 0.3] < clean - 0.3  # the attack works: a plain CNN is not robust at 0.3
        assert rows[name, "pgd", 0.3] <= rows[name, "fgsm", 0.3] + 1 / 450


def test_saved_models_are_the_trained_ones(quick_dir):
    state = _read(quick_dir)
    data = study.load_digits()
    models = {"single": keras.saving.load_model(quick_dir / "single.keras")}
    models.update({name: gradkit.load(quick_dir / name) for name in ("adaboost_m1", "adv_boost")})
    for name, model in models.items():
        ensemble = as_ensemble(model)
        record = state["models"][name]
        assert np.mean(ensemble.predict(data.x_test) == data.y_test) == record["clean_accuracy"]
        assert sum(m.count_params() for m in ensemble.models) == record["n_params"]
    for name in ("adaboost_m1", "adv_boost"):
        assert list(models[name].estimator_weights_) == state["models"][name]["estimator_weights"]
    assert models["adv_boost"].adversarial["eps"] == 0.1


def test_table_names_backend_models_and_epsilons(quick_dir):
    table = study.format_table(_read(quick_dir))
    assert f"Keras backend: {BACKEND}" in table
    assert "fgsm accuracy" in table and "pgd accuracy" in table and "eps=0.3" in table
    single = [line for line in table.splitlines() if line.startswith("single")]
    clean = _read(quick_dir)["models"]["single"]["clean_accuracy"]
    assert len(single) == 2 and single[0].split()[1] == f"{clean:.3f}"


def test_rerun_trains_and_attacks_nothing(quick_dir, tmp_path, monkeypatch):
    out = _copy(quick_dir, tmp_path)
    before = _read(out)
    _no_training(monkeypatch)
    monkeypatch.setattr(evaluation, "robustness_curve", lambda *a, **k: pytest.fail("attacked again"))
    result = study.run_study({"quick": True, "out": str(out)}, progress=False)
    assert result == before == _read(out)


def test_resume_after_interrupted_training(quick_dir, tmp_path, monkeypatch):
    out = _copy(quick_dir, tmp_path)
    state = _read(out)
    for key in ("models", "grad_norm"):  # as if adv_boost was being trained when the run stopped
        state[key].pop("adv_boost")
    state["results"] = [r for r in state["results"] if r["model"] != "adv_boost"]
    _write(out, state)
    shutil.rmtree(out / "adv_boost")
    _no_training(monkeypatch)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(_run, "_train_boosted", interrupted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 130
    assert _read(out) == state and not [f for f in os.listdir(out) if f.startswith(".tmp")]

    calls = _no_training(monkeypatch, allowed={"adv_boost": str(quick_dir / "adv_boost")})
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 0
    assert calls == ["adv_boost"]  # the finished models were loaded, not retrained
    final, original = _read(out), _read(quick_dir)
    assert final["grad_norm"]["adv_boost"] == [1.0, 2.0]
    assert final["models"]["adv_boost"]["clean_accuracy"] == original["models"]["adv_boost"]["clean_accuracy"]
    assert _rows(final) == _rows(original)
    assert os.path.isfile(out / "adv_boost" / "boost.json")


def test_resume_after_interrupted_attacks(quick_dir, tmp_path, monkeypatch):
    out = _copy(quick_dir, tmp_path)
    state = _read(out)
    finished = {("single", "fgsm"), ("single", "pgd"), ("adv_boost", "fgsm")}
    kept = [r for r in state["results"] if (r["model"], r["attack"]) in finished]
    _write(out, {**state, "results": kept})
    for name in ("results.csv", "robustness.png"):
        os.remove(out / name)
    _no_training(monkeypatch)
    real, calls = evaluation.robustness_curve, []

    def interrupted(model, x, y, *, attack, epsilons, **kwargs):
        calls.append(attack)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(model, x, y, attack=attack, epsilons=epsilons, **kwargs)

    monkeypatch.setattr(evaluation, "robustness_curve", interrupted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 130
    assert len(_read(out)["results"]) == len(kept) + 3  # the finished curve was saved
    calls.clear()

    def counted(*args, **kwargs):
        calls.append(kwargs["attack"])
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "robustness_curve", counted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 0
    assert calls == ["pgd", "pgd"]  # adaboost_m1 pgd and adv_boost pgd: the only curves left
    assert _rows(_read(out)) == _rows(_read(quick_dir))
    assert set(os.listdir(out)) == FILES


def test_changed_config_backend_or_data_is_refused(quick_dir, tmp_path, capsys):
    out = _copy(quick_dir, tmp_path)
    snapshot = {name: (out / name).read_bytes() for name in ("config.json", "results.json", "results.csv")}
    assert cli.main(["study", "--quick", "--epsilons", "0,0.2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and "epsilons: [0.0, 0.1, 0.3] -> [0.0, 0.2]" in err
    assert cli.main(["study", "--out", str(out)]) == 2  # without --quick
    assert "quick: True -> False" in capsys.readouterr().err
    meta = _read(out, "config.json")
    _write(out, {**meta, "backend": "other"}, "config.json")
    assert cli.main(["study", "--quick", "--out", str(out)]) == 2
    assert "backend 'other'" in capsys.readouterr().err
    _write(out, meta, "config.json")
    config = {k: v for k, v in study.make_config(quick=True).items() if k != "out"}
    with pytest.raises(study.ConfigError, match="other data"):
        _outdir.open_out(str(out), config, BACKEND, "0" * 64)
    assert (out / "results.json").read_bytes() == snapshot["results.json"]
    assert (out / "results.csv").read_bytes() == snapshot["results.csv"]
