"""`gradkit study --quick` end to end on digits (`gradkit.study.run_study`), resume after interruptions,
changed configurations.

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
import zipfile

import h5py
import keras
import numpy as np
import pytest

import gradkit
from gradkit import cli, study
from gradkit.errors import WorseThanRandomError
from gradkit.evaluation import certified_points
from gradkit.gradients import as_ensemble
from gradkit.study import _attack, _outdir, _run

# training's private record of what is installed: the seam that shows the saved adv_single keeps no trace
from gradkit.training._install import installed_state

BACKEND = keras.backend.backend()
FILES = {"config.json", "results.json", "results.csv", "samples.csv", "robustness.png", "grad_norm.png",
         "single.keras", "adv_single.keras", "adaboost_m1", "adv_boost"}  # fmt: skip
MODEL_KEYS = {"clean_accuracy", "n_params", "train_seconds", "epochs"}
BOOSTED_KEYS = MODEL_KEYS | {"members", "asked", "stop_reason", "estimator_weights"}
ATTACKS = ("worst_case", "fgsm", "pgd")


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
        path = allowed[name]
        return (keras.saving.load_model(path) if path.endswith(".keras") else gradkit.load(path)), [1.0, 2.0]

    monkeypatch.setattr(_run, "_train_single", forbid)
    monkeypatch.setattr(_run, "_train_boosted", forbid)
    return calls


def _no_attacks(monkeypatch):
    monkeypatch.setattr(_attack, "evaluate", lambda *a, **k: pytest.fail("attacked again"))


def test_files_and_results_schema(quick_dir):
    assert set(os.listdir(quick_dir)) == FILES  # no temporary files left behind
    for png in ("robustness.png", "grad_norm.png"):
        assert (quick_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    state = _read(quick_dir)
    assert list(state) == [
        "config",
        "backend",
        "dataset",
        "norm",
        "adv_norm",
        "n_train",
        "n_test",
        "n_classes",
        "models",
        "results",
        "evaluations",
        "warnings",
        "samples",
        "grad_norm",
        "comparisons",
        "statistics",
    ]
    expected = study.make_config(quick=True)
    expected.pop("out")
    assert expected.pop("certify") is None  # stored only when set: the files of a study before --certify
    assert state["config"] == expected and _read(quick_dir, "config.json")["config"] == expected
    assert expected["epsilons"] == [0.0, 0.1, 0.3] and expected["n_estimators"] == 2
    assert (state["backend"], state["dataset"], state["n_train"], state["n_test"]) == (
        BACKEND,
        "digits",
        1347,
        450,
    )
    assert (state["norm"], state["adv_norm"], expected["norm"]) == ("linf", "linf", "linf")
    assert list(state["models"]) == ["single", "adv_single", "adaboost_m1", "adv_boost"]
    epochs = expected["epochs"]
    for name in ("single", "adv_single"):
        assert set(state["models"][name]) == MODEL_KEYS
        assert state["grad_norm"][name] == [state["grad_norm"][name][0]]  # one fit
        assert len(state["grad_norm"][name][0]) == epochs * 2  # as many epochs as the two members together
        assert state["models"][name]["epochs"] == epochs * 2
    augment = expected["adv_mode"] == "augment"  # then adv_boost's round 0 fits twice
    for name, extra_fits in (("adaboost_m1", 0), ("adv_boost", int(augment))):
        record = state["models"][name]
        assert set(record) == BOOSTED_KEYS and record["epochs"] == epochs and record["asked"] == 2
        weights = record["estimator_weights"]
        assert 1 <= len(weights) <= 2 and all(w > 0 for w in weights) and record["members"] == len(weights)
        assert (record["stop_reason"] is None) == (len(weights) == 2)
        assert [len(fit) for fit in state["grad_norm"][name]] == [epochs] * (len(weights) + extra_fits)
    for fits in state["grad_norm"].values():
        assert all(math.isfinite(v) and v > 0 for fit in fits for v in fit)
    over_all = [r for r in state["results"] if r["attack"] != "standard"]
    assert len(over_all) == 4 * 3 * 3  # models x (worst case, fgsm, pgd) x epsilons
    keys = ["model", "attack", "norm", "eps", "accuracy", "n_points", "ci_low", "ci_high", "scope"]
    assert all(list(row) == keys for row in state["results"])
    assert [r["attack"] for r in state["results"][:3]] == ["worst_case"] * 3
    with open(quick_dir / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["model", "attack", "norm", "eps", "accuracy", "ci_low", "ci_high", "n_points",
                             "scope"]  # fmt: skip
    assert [(r["model"], r["attack"], r["norm"], float(r["eps"]), float(r["accuracy"]), int(r["n_points"]),
             float(r["ci_low"]), float(r["ci_high"]), r["scope"]) for r in rows] == [
        tuple(r.values()) for r in state["results"]
    ]  # fmt: skip
    assert {r["scope"] for r in rows} == {"worst_case", "cumulative", "remaining"}
    evaluated = {(e["model"], e["attack"], e["eps"]) for e in state["evaluations"]}
    assert ("single", "standard", 0.1) in evaluated and ("adv_boost", "pgd", 0.1) in evaluated
    for ev in state["evaluations"]:
        assert set(ev) >= {"per_attack", "flags", "n_points", "seconds", "n_forwards", "n_gradients"}
        broken = sum(r["n_broken"] for r in ev["per_attack"].values())  # its points are all clean-correct
        assert "robust_accuracy" not in ev and ev["accuracy"] == pytest.approx(1 - broken / ev["n_points"])
        for record in ev["per_attack"].values():  # one accuracy per attack, of the points it ran on
            assert "robust_accuracy" not in record
            if record["n_points"]:
                assert record["accuracy"] == pytest.approx(1 - record["n_broken"] / record["n_points"])
    boosted = next(e for e in state["evaluations"] if (e["model"], e["attack"]) == ("adv_boost", "standard"))
    assert "apgd-ce/vote_margin" in boosted["per_attack"]  # ensemble-aware objectives on boosted models


def _wilson_by_hand(k, n, z=1.959963984540054):
    phat, z2 = k / n, z * z
    center, half = phat + z2 / (2 * n), z * math.sqrt(phat * (1 - phat) / n + z2 / (4 * n * n))
    return (center - half) / (1 + z2 / n), (center + half) / (1 + z2 / n)


def test_every_row_has_its_wilson_interval_and_points(quick_dir):
    state = _read(quick_dir)
    samples = state["samples"]
    for row in state["results"]:
        n = row["n_points"]
        k = round(row["accuracy"] * n)
        assert k / n == row["accuracy"]
        low, high = _wilson_by_hand(k, n)
        assert row["ci_low"] == pytest.approx(max(low, 0.0), abs=1e-9)
        assert row["ci_high"] == pytest.approx(min(high, 1.0), abs=1e-9)
        if row["attack"] == "standard":  # the strong evaluation's own figure, on the points it attacked
            (ev,) = [e for e in state["evaluations"] if (e["model"], e["attack"], e["eps"]) == (
                row["model"], "standard", row["eps"])]  # fmt: skip
            assert (row["scope"], n, row["accuracy"]) == ("remaining", ev["n_points"], ev["accuracy"])
            worst = samples[row["model"]]["broken"]["worst_case"]
            assert sum(b is None or b > row["eps"] for b in worst) == k  # what standard left: the worst case
        else:
            assert n == 450 and row["scope"] == (
                "worst_case" if row["attack"] == "worst_case" else "cumulative"
            )
    assert state["statistics"]["interval"] == "95% Wilson score interval"


def test_paired_comparisons_are_mcnemar_on_the_worst_case(quick_dir):
    from scipy.stats import binomtest

    state = _read(quick_dir)
    rows = _rows(state)
    pairs = {(c["a"], c["b"]) for c in state["comparisons"]}
    assert pairs == {("adv_boost", "adv_single"), ("adv_boost", "single"), ("adaboost_m1", "single"),
                     ("adv_single", "single")}  # fmt: skip
    assert len(state["comparisons"]) == 4 * 3
    for c in state["comparisons"]:
        a, b = (np.array([x is None or x > c["eps"] for x in state["samples"][m]["broken"]["worst_case"]])
                for m in (c["a"], c["b"]))  # fmt: skip
        assert (c["only_a"], c["only_b"]) == (int(np.sum(a & ~b)), int(np.sum(b & ~a)))
        difference = rows[c["a"], "worst_case", c["eps"]] - rows[c["b"], "worst_case", c["eps"]]
        assert c["difference"] == pytest.approx(difference)
        discordant = c["only_a"] + c["only_b"]
        expected = binomtest(c["only_a"], discordant, 0.5).pvalue if discordant else 1.0
        assert c["p_value"] == pytest.approx(expected, abs=1e-12)
    table = study.format_table(state)
    assert "paired comparison, worst case" in table and "McNemar's exact p" in table
    line = next(x for x in table.splitlines() if x.startswith("adv_single - single"))
    at_01 = next(
        c for c in state["comparisons"] if (c["a"], c["b"], c["eps"]) == ("adv_single", "single", 0.1)
    )
    assert f"{at_01['difference']:+.3f} p" in line


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
        for e in (0.0, 0.1, 0.3):  # the worst case is at or below every attack
            assert rows[name, "worst_case", e] <= min(rows[name, "fgsm", e], rows[name, "pgd", e])


def test_samples_csv_agrees_with_the_worst_case(quick_dir):
    state = _read(quick_dir)
    with open(quick_dir / "samples.csv", newline="") as f:
        samples = list(csv.DictReader(f))
    assert len(samples) == 450 and list(samples[0])[:5] == [
        "index",
        "label",
        "single_clean",
        "single_eps",
        "single_by",
    ]
    np.testing.assert_array_equal([int(r["label"]) for r in samples], study.load_digits().y_test)
    rows = _rows(state)
    for name in study.MODELS:
        clean = np.array([int(r[f"{name}_clean"]) for r in samples])
        assert clean.mean() == state["models"][name]["clean_accuracy"]
        eps = np.array([float(r[f"{name}_eps"]) if r[f"{name}_eps"] else np.inf for r in samples])
        by = [r[f"{name}_by"] for r in samples]
        for e in (0.0, 0.1, 0.3):
            assert np.mean(eps > e) == pytest.approx(rows[name, "worst_case", e])
        assert all((b == "clean") == (c == 0) for b, c in zip(by, clean))
        assert all((e == np.inf) == (b == "") for e, b in zip(eps, by))  # broken, and by what
        assert {b.split(":")[0] for b in by if b} <= {"clean", "fgsm", "pgd", "standard"}


def test_saved_models_are_the_trained_ones(quick_dir):
    state = _read(quick_dir)
    data = study.load_digits()
    models = {name: keras.saving.load_model(quick_dir / f"{name}.keras") for name in ("single", "adv_single")}
    models.update({name: gradkit.load(quick_dir / name) for name in ("adaboost_m1", "adv_boost")})
    for name, model in models.items():
        ensemble = as_ensemble(model)
        record = state["models"][name]
        assert np.mean(ensemble.predict(data.x_test) == data.y_test) == record["clean_accuracy"]
        assert sum(m.count_params() for m in ensemble.models) == record["n_params"]
    for name in ("adaboost_m1", "adv_boost"):
        assert list(models[name].estimator_weights_) == state["models"][name]["estimator_weights"]
    assert models["adv_boost"].adversarial["eps"] == 0.1 and models["adv_boost"].adversarial["norm"] == "linf"
    assert models["adv_boost"].adversarial["mode"] == state["config"]["adv_mode"]


def test_adv_single_is_the_robust_baseline(quick_dir):
    state = _read(quick_dir)
    rows, models = _rows(state), state["models"]
    assert models["adv_single"]["clean_accuracy"] >= 0.93  # measured 0.971 (single: 0.969) on TensorFlow
    assert models["adv_single"]["clean_accuracy"] >= models["single"]["clean_accuracy"] - 0.03
    assert rows["adv_single", "worst_case", 0.1] > rows["single", "worst_case", 0.1] + 0.05  # 0.696 vs 0.569
    assert rows["adv_single", "pgd", 0.1] > rows["single", "pgd", 0.1] + 0.05
    by = state["samples"]["adv_single"]["by"]
    assert sum(b == "clean" for b in by) == round((1 - models["adv_single"]["clean_accuracy"]) * 450)


def test_a_model_near_chance_is_flagged_after_training(quick_dir):
    """A model whose clean accuracy is less than a quarter of the way from chance to 1 gets a
    `near_chance` warning (adv_single at --adv-eps 0.3 on the quick study: 0.149); healthy ones none."""
    config = study.StudyConfig(adv_eps=0.3)
    (warning,) = _run._training_warnings("adv_single", 0.149, 10, config)
    assert (warning["name"], warning["attack"], warning["model"]) == ("near_chance", "training", "adv_single")
    assert "clean accuracy 0.149, near chance (0.100 for 10 classes)" in warning["message"]
    assert "at eps 0.3 did not learn: a smaller --adv-eps or more --epochs" in warning["message"]
    assert "--adv-eps" not in _run._training_warnings("single", 0.2, 10, config)[0]["message"]
    cases = [(0.32, 10, True), (0.33, 10, False), (0.6, 2, True), (0.63, 2, False)]  # limits 0.325, 0.625
    for accuracy, n_classes, flagged in cases:
        assert bool(_run._training_warnings("single", accuracy, n_classes, config)) == flagged
    state = _read(quick_dir)
    assert not [w for w in state["warnings"] if w["name"] == "near_chance"]
    table = study.format_table({**state, "warnings": [warning]})
    assert "  adv_single (training): [near_chance] clean accuracy 0.149" in table


def test_adv_single_file_has_no_trace_of_adversarial_training(quick_dir, tmp_path):
    model = keras.saving.load_model(quick_dir / "adv_single.keras")
    assert "compute_loss" not in vars(model) and installed_state(model) is None
    with (
        zipfile.ZipFile(quick_dir / "adv_single.keras") as a,
        zipfile.ZipFile(quick_dir / "single.keras") as b,
    ):
        assert a.namelist() == b.namelist()
        assert "adversarial" not in a.read("config.json").decode()
        a.extract("model.weights.h5", tmp_path / "a")
        b.extract("model.weights.h5", tmp_path / "b")
    with (
        h5py.File(tmp_path / "a" / "model.weights.h5") as fa,
        h5py.File(tmp_path / "b" / "model.weights.h5") as fb,
    ):
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
    assert names_a == names_b  # the same variables as the plainly trained network: no extra state


def test_table_names_backend_models_and_epsilons(quick_dir):
    table = study.format_table(_read(quick_dir))
    assert f"Keras backend: {BACKEND}" in table
    assert "fgsm accuracy, cumulative" in table and "pgd accuracy, cumulative" in table and "eps=0.3" in table
    assert "n=450 test points, 95% Wilson score interval in brackets" in table
    lines = table.splitlines()
    first = next(i for i, line in enumerate(lines) if "accuracy" in line and "clean" not in line)
    assert lines[first].startswith("worst case accuracy")  # the table leads with the worst case
    single = [line for line in lines if line.startswith("single ")]
    state = _read(quick_dir)
    clean = state["models"]["single"]["clean_accuracy"]
    assert len(single) == 4 and single[0].split()[1] == f"{clean:.3f}"
    low, high = next(
        (r["ci_low"], r["ci_high"]) for r in state["results"] if r["model"] == "single" and r["eps"] == 0.0
    )
    assert single[0].split()[2] == f"[{low:.3f},{high:.3f}]".replace("0.", ".")
    assert "standard accuracy on the n points no other attack broke" in table and " n=" in single[3]
    assert "single 6 epochs" in table and "adaboost_m1 " in table and "/2 members x 3 epochs" in table
    assert "adv_single 6 epochs" in table and len([x for x in lines if x.startswith("adv_single  ")]) == 4
    assert "adv_single trains on pgd Linf eps 0.1, 5 steps examples made inside fit" in table
    assert "Linf" in table and "pgd 10 steps" in table and "square 100 queries" in table
    assert "warnings:" in table and "[one_network]" in table  # two members: one outvotes the other
    files = study.format_table(_read(quick_dir), out=str(quick_dir))
    assert str(quick_dir) in files and "samples.csv" in files and "robustness.png" in files


def test_rerun_trains_and_attacks_nothing(quick_dir, tmp_path, monkeypatch):
    out = _copy(quick_dir, tmp_path)
    before = _read(out)
    _no_training(monkeypatch)
    _no_attacks(monkeypatch)
    told = []
    result = study.run_study({"quick": True, "out": str(out)}, progress=False, log=told.append)
    assert result == before == _read(out)
    assert len(told) == 5 and "reused 12 finished (model, eps) results" in told[-1]
    assert all("reused the trained model" in line for line in told[:4])
    assert told[1] == f"reused the trained model adv_single from {out / 'adv_single.keras'}"


@pytest.mark.parametrize(
    "name,file,trainer",
    [("adv_boost", "adv_boost", "_train_boosted"), ("adv_single", "adv_single.keras", "_train_single")],
)
def test_resume_after_interrupted_training(quick_dir, tmp_path, monkeypatch, name, file, trainer):
    out = _copy(quick_dir, tmp_path)
    state = _read(out)
    for key in ("models", "grad_norm"):  # as if `name` was being trained when the run stopped
        state[key].pop(name)
    for key in ("results", "evaluations", "warnings"):
        state[key] = [r for r in state[key] if r["model"] != name]
    state["samples"].pop(name)
    _write(out, state)
    shutil.rmtree(out / file) if os.path.isdir(out / file) else os.remove(out / file)
    _no_training(monkeypatch)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(_run, trainer, interrupted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 130
    assert _read(out) == state and not [f for f in os.listdir(out) if f.startswith(".tmp")]

    calls = _no_training(monkeypatch, allowed={name: str(quick_dir / file)})
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 0
    assert calls == [name]  # the finished models were loaded, not retrained
    final, original = _read(out), _read(quick_dir)
    assert final["grad_norm"][name] == [1.0, 2.0]
    assert final["samples"][name] == original["samples"][name]
    assert final["models"][name]["clean_accuracy"] == original["models"][name]["clean_accuracy"]
    assert _rows(final) == _rows(original)
    assert os.path.exists(out / file) and set(os.listdir(out)) == FILES


def test_a_boosted_model_that_cannot_train_exits_1(quick_dir, tmp_path, monkeypatch, capsys):
    out = _copy(quick_dir, tmp_path)
    state = _read(out)
    for key in ("models", "grad_norm"):  # adv_boost not trained yet
        state[key].pop("adv_boost")
    for key in ("results", "evaluations", "warnings"):
        state[key] = [r for r in state[key] if r["model"] != "adv_boost"]
    state["samples"].pop("adv_boost")
    _write(out, state)
    shutil.rmtree(out / "adv_boost")
    _no_training(monkeypatch)

    def worse(*args):  # what AdaBoostM1.fit raises for a first learner worse than random
        raise WorseThanRandomError("The first learner is worse than random: weighted error 0.6340 >= 0.5000")

    monkeypatch.setattr(_run, "_train_boosted", worse)
    capsys.readouterr()
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 1
    full = capsys.readouterr().err
    err = full.splitlines()[-1]  # after the "reused the trained model" lines
    assert "Traceback" not in full and err.startswith(
        "gradkit study: error: adv_boost could not be trained. The first learner is worse"
    )
    assert "--adv-eps" in err and "another --out" in err
    assert _read(out) == state and not [f for f in os.listdir(out) if f.startswith(".tmp")]


def test_resume_after_interrupted_attacks(quick_dir, tmp_path, monkeypatch):
    # As if the run stopped while attacking adv_single: every other model finished, adv_single has only
    # its clean record. Only adv_single is attacked again (the cheapest model to attack).
    out = _copy(quick_dir, tmp_path)
    state = _read(out)
    kept = [r for r in state["results"] if r["model"] != "adv_single"]
    evaluations = [e for e in state["evaluations"] if e["model"] != "adv_single"]
    warnings = [w for w in state["warnings"] if w["model"] != "adv_single"]
    samples = {**state["samples"], "adv_single": _attack.new_record(
        state["samples"]["adv_single"]["clean"], state["config"]["attacks"])}  # fmt: skip
    _write(out, {**state, "results": kept, "evaluations": evaluations, "warnings": warnings,
                 "samples": samples})  # fmt: skip
    for name in ("results.csv", "robustness.png", "samples.csv"):
        os.remove(out / name)
    _no_training(monkeypatch)
    real, calls = _attack.evaluate, []

    def interrupted(model, x, y, *, eps, attacks, **kwargs):
        calls.append(eps)
        if len(calls) == 4:  # adv_single at eps 0.1 (fgsm, pgd, standard) finished, then eps 0.3
            raise KeyboardInterrupt
        return real(model, x, y, eps=eps, attacks=attacks, **kwargs)

    monkeypatch.setattr(_attack, "evaluate", interrupted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 130
    assert calls == [0.1, 0.1, 0.1, 0.3]
    saved = [r for r in state["results"] if r["model"] == "adv_single" and r["eps"] in (0.0, 0.1)]
    assert len(saved) == 3 + 4  # worst case, fgsm, pgd at eps 0; and standard at 0.1
    assert len(_read(out)["results"]) == len(kept) + len(saved)  # adv_single at eps 0 and 0.1 were saved
    calls.clear()

    def counted(model, x, y, *, eps, attacks, **kwargs):
        calls.append(eps)
        return real(model, x, y, eps=eps, attacks=attacks, **kwargs)

    monkeypatch.setattr(_attack, "evaluate", counted)
    assert cli.main(["study", "--quick", "--no-progress", "--out", str(out)]) == 0
    assert set(calls) == {0.3}  # adv_single resumes at eps 0.3; eps 0.1 and the other models are not redone
    final, original = _read(out), _read(quick_dir)
    assert _rows(final) == _rows(original)
    assert final["samples"] == original["samples"]
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


def _certified_at(up_to, eps):
    return np.array([c is not None and c >= eps for c in up_to], bool)


def test_certify_a_finished_study_then_drop_it_again(quick_dir, tmp_path, monkeypatch):
    """`--certify crown-ibp` on the finished quick study trains and attacks nothing, adds a certified row
    per model and eps (eps 0: the clean accuracy) that no attack contradicts on any point, and a rerun
    without it gives back the files of the study without certificates, byte for byte."""
    out = _copy(quick_dir, tmp_path)
    files = ("config.json", "results.json", "results.csv", "samples.csv", "robustness.png")
    before = {name: (out / name).read_bytes() for name in files}
    _no_training(monkeypatch)
    _no_attacks(monkeypatch)
    loaded, load = {}, _run.load_model
    monkeypatch.setattr(_run, "load_model", lambda name, path: loaded.setdefault(name, load(name, path)))
    state = study.run_study({"quick": True, "out": str(out), "certify": "crown-ibp"}, progress=False)
    original = _read(quick_dir)
    assert [r for r in state["results"] if r["attack"] != "certified"] == original["results"]
    rows = {(r["model"], r["eps"]): r for r in state["results"] if r["attack"] == "certified"}
    assert list(rows) == [(m, e) for m in study.MODELS for e in (0.0, 0.1, 0.3)]
    attacks = [r["attack"] for r in state["results"] if r["model"] == "single"]
    assert attacks[:6] == ["worst_case"] * 3 + ["certified"] * 3  # the certified row below the worst case
    for (name, eps), row in rows.items():
        up_to = state["samples"][name]["certified"]
        certified = _certified_at(up_to, eps)
        robust = np.array([b is None or b > eps for b in state["samples"][name]["broken"]["worst_case"]])
        assert not np.any(certified & ~robust), (name, eps)  # certified <= worst case, point by point
        assert (row["accuracy"], row["n_points"], row["scope"]) == (certified.mean(), 450, "certified")
        assert row["accuracy"] <= _rows(original)[name, "worst_case", eps]
    for name in study.MODELS:
        assert rows[name, 0.0]["accuracy"] == state["models"][name]["clean_accuracy"]
    checks = state["certified_checks"]
    assert len(checks) == 12 and not any(c["contradicted"] for c in checks)
    assert not [w for w in state["warnings"] if w["name"] == "certificate_contradicted"]
    table = study.format_table(state).splitlines()
    top = table.index(next(x for x in table if x.startswith("check, per point: certified <= worst case")))
    assert table[top - 7].startswith("certified accuracy, crown-ibp bounds: a lower bound")
    assert all(line.count(" ok") == 3 for line in table[top + 2 : top + 6])
    assert _read(out, "config.json")["config"]["certify"] == "crown-ibp"
    with open(out / "samples.csv", newline="") as f:
        column = [r["adv_single_certified_up_to"] for r in csv.DictReader(f)]
    assert column == ["" if c is None else str(c) for c in state["samples"]["adv_single"]["certified"]]
    assert (out / "robustness.png").read_bytes() != before["robustness.png"]
    _certificates_hold_where_they_prove_something(loaded)

    study.run_study({"quick": True, "out": str(out)}, progress=False)  # without --certify again
    assert {name: (out / name).read_bytes() for name in files} == before


def _certificates_hold_where_they_prove_something(models):
    """At eps 0.02 (Linf), where CROWN-IBP certifies most points of the quick study's models (the study's
    eps 0.1 certifies none), no certified point is broken: by PGD on the single networks, by APGD-CE on
    the vote's margin on the boosted ones (so their certified fraction, the vote's certificate from the
    members', never exceeds what that attack leaves robust). The first 150 test points."""
    data = study.load_digits()
    x, y = data.x_test[:150], data.y_test[:150]
    for name, model in models.items():
        options = dict(eps=0.02, norm=np.inf, clip_values=(0.0, 1.0))
        certified = certified_points(model, x, y, method="crown-ibp", batch_size=None, **options)
        assert certified.mean() > 0.3, name  # measured 0.65 to 0.77 (TensorFlow)
        attack = "pgd" if name in ("single", "adv_single") else "apgd-ce/vote_margin"
        result = gradkit.evaluate(
            model, x[certified], y[certified], attacks=[attack], steps=5, verbose=0, **options
        )
        assert result.robust_accuracy == 1.0 and np.all(result.robust), name
