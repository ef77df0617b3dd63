"""`gradkit evaluate` and `gradkit merge`: the command line equals `gradkit.evaluate` point for point, shards
merged equal one run, and bad input exits 2 with a message and writes nothing."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import gradkit
from gradkit import cli, evaluation
from helpers.cli import run_evaluate, samples

ATTACK = ["--steps", "4", "--n-queries", "20", "--batch-size", "16", "--seed", "3", "--no-progress"]
OPTIONS = dict(clip_values=(0.0, 1.0), batch_size=16, seed=3, steps=4, n_queries=20, verbose=0)


def _data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 6)).astype("float32")
    y = (x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5)
    return x, y


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small trained 4-class classifier saved as .keras, its test data as .npz, and both in memory."""
    folder = tmp_path_factory.mktemp("evaluate")
    keras.utils.set_random_seed(0)
    x, y = _data(256, seed=1)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(4, activation="softmax"),
        ]
    )
    model.compile(keras.optimizers.Adam(0.03), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=10, batch_size=64, verbose=0)
    model.save(folder / "model.keras")
    x_test, y_test = _data()
    np.savez(folder / "test.npz", x_test=x_test, y_test=y_test)
    return {"model": str(folder / "model.keras"), "data": str(folder / "test.npz"), "x": x_test, "y": y_test}


_run, _samples = run_evaluate, samples


def test_evaluate_equals_gradkit_evaluate_point_for_point(capsys, files, tmp_path):
    out = tmp_path / "out"
    code, seen = _run(capsys, files["model"], files["data"], "--eps", "0.15", "--out", str(out), *ATTACK)
    assert code == 0, seen.err
    model = keras.saving.load_model(files["model"])
    expected = gradkit.evaluate(model, files["x"], files["y"], eps=0.15, **OPTIONS)
    report = json.loads((out / "evaluation.json").read_text())
    assert report["robust_accuracy"] == expected.robust_accuracy
    assert report["clean_accuracy"] == expected.clean_accuracy
    assert 0 < expected.robust_accuracy < expected.clean_accuracy  # the attack did break some points
    rows = _samples(out)
    assert list(rows[0]) == ["index", "label", "clean_prediction", "robust", "broken_by"]
    assert [r["robust"] == "1" for r in rows] == expected.robust.tolist()
    assert [r["broken_by"] or None for r in rows] == expected.broken_by
    prediction = np.argmax(model.predict(files["x"], verbose=0), axis=1)
    assert [int(r["clean_prediction"]) for r in rows] == prediction.tolist()
    assert report["versions"]["keras"] == keras.__version__
    assert report["versions"]["backend"] == keras.backend.backend()
    assert report["data"]["n_points"] == 48 and report["data"]["x"].startswith(report["data"]["x"][:64])
    assert list(report["results"][0]["per_attack"]) == ["apgd-ce", "apgd-t", "fab-t", "square"]
    assert "robust accuracy" in seen.out and "apgd-t" in seen.out


def test_several_eps_reuse_the_smaller_ones(capsys, files, tmp_path):
    out = tmp_path / "out"
    code, seen = _run(capsys, files["model"], files["data"], "--eps", "0.15,0.05", "--out", str(out), *ATTACK)
    assert code == 0, seen.err
    report = json.loads((out / "evaluation.json").read_text())
    assert report["epsilons"] == [0.05, 0.15] and report["eps"] == 0.15
    model = keras.saving.load_model(files["model"])
    first = gradkit.evaluate(model, files["x"], files["y"], eps=0.05, **OPTIONS)
    assert report["results"][0]["robust_accuracy"] == first.robust_accuracy
    rows = _samples(out)
    at = [r["broken_at_eps"] for r in rows]
    assert [a == "" for a in at] == [r["robust"] == "1" for r in rows]
    broken_small = [a not in ("", "0.15") for a in at]  # broken at 0 (clean) or 0.05
    assert broken_small == [not r for r in first.robust]
    assert report["results"][1]["robust_accuracy"] <= first.robust_accuracy


def test_two_shards_merged_equal_one_run(capsys, files, tmp_path):
    args = [files["model"], files["data"], "--eps", "0.1,0.15", *ATTACK]
    assert _run(capsys, *args, "--out", str(tmp_path / "one"))[0] == 0
    for k in (1, 2):
        assert _run(capsys, *args, "--shard", f"{k}/2", "--out", str(tmp_path / f"part{k}"))[0] == 0
    part = json.loads((tmp_path / "part1" / "evaluation.json").read_text())
    assert part["rows"] == [0, 16] and part["shard"] == "1/2"
    code = cli.main(
        ["merge", str(tmp_path / "part2"), str(tmp_path / "part1"), "--out", str(tmp_path / "all")]
    )
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "all" / "samples.csv").read_text() == (tmp_path / "one" / "samples.csv").read_text()
    one, merged = (json.loads((tmp_path / d / "evaluation.json").read_text()) for d in ("one", "all"))
    for key in ("clean_accuracy", "robust_accuracy", "epsilons", "settings", "model", "data"):
        assert merged[key] == one[key], key
    for a, b in zip(merged["results"], one["results"]):
        assert a["robust_accuracy"] == b["robust_accuracy"]
        for name in a["per_attack"]:
            for key in ("n_points", "n_broken", "accuracy", "robust_accuracy", "n_gradients"):
                assert a["per_attack"][name][key] == pytest.approx(b["per_attack"][name][key]), (name, key)


def _shard(files, k, n=2, **changes):
    options = {**OPTIONS, "attacks": ["fgsm"], "epsilons": [0.1], **changes}
    rows = evaluation.shard_rows(len(files["x"]), k, n, options["batch_size"])
    return evaluation.evaluate_shard(keras.saving.load_model(files["model"]), files["x"], files["y"],
                                     rows=rows, **options)  # fmt: skip


def test_merge_refuses_pieces_that_do_not_belong_together(capsys, files, tmp_path):
    good = [_shard(files, 0), _shard(files, 1)]
    assert evaluation.merge_shards(good).evaluations()[0].robust.shape == (48,)
    with pytest.raises(ValueError, match="seed: 3 in shard 0 vs 4"):
        evaluation.merge_shards([good[0], _shard(files, 1, seed=4)])
    with pytest.raises(ValueError, match=r"rows \[16, 48\) are missing"):
        evaluation.merge_shards([good[0]])
    with pytest.raises(ValueError, match=r"rows \[0, 16\) are duplicated"):
        evaluation.merge_shards([good[0], good[0], good[1]])
    other = evaluation.evaluate_shard(
        keras.saving.load_model(files["model"]), files["x"][::-1].copy(), files["y"][::-1].copy(),
        epsilons=[0.1], rows=(16, 48), **{**OPTIONS, "attacks": ["fgsm"]},
    )  # fmt: skip
    with pytest.raises(ValueError, match="differs in x: "):
        evaluation.merge_shards([good[0], other])
    retrained = keras.saving.load_model(files["model"])
    retrained.layers[-1].bias.assign(retrained.layers[-1].bias + 0.01)
    moved = evaluation.evaluate_shard(
        retrained, files["x"], files["y"], epsilons=[0.1], rows=(16, 48), **{**OPTIONS, "attacks": ["fgsm"]}
    )
    with pytest.raises(ValueError, match="shard 1 differs in model: "):
        evaluation.merge_shards([good[0], moved])
    with pytest.raises(ValueError, match="differs in epsilons: "):
        evaluation.merge_shards([good[0], _shard(files, 1, epsilons=[0.2])])
    for i, shard in enumerate(good):
        evaluation.write_report(shard, tmp_path / f"p{i}")
    out = tmp_path / "merged"
    code = cli.main(["merge", str(tmp_path / "p0"), str(tmp_path / "p0"), "--out", str(out)])
    assert code == 2 and "duplicated" in capsys.readouterr().err and not out.exists()
    code = cli.main(["merge", str(tmp_path / "p0"), str(tmp_path), "--out", str(out)])
    assert code == 2 and "holds no shard.json" in capsys.readouterr().err and not out.exists()


def test_bad_input_exits_2_names_what_differs_and_writes_nothing(capsys, files, tmp_path):
    out = tmp_path / "out"
    x, y = files["x"], files["y"]
    cases = {
        "wide.npz": (dict(x=np.zeros((8, 5), "float32"), y=np.zeros(8, "int64")), "x"),
        "labels.npz": (
            dict(x_test=x, y_test=np.full(48, 7)),
            "`y` of `DATA` (the labels) holds class ids outside [0, 3]",
        ),
        "range.npz": (dict(x_test=x * 2, y_test=y), "`--clip-values` must hold the values of `DATA`'s x"),
        "keys.npz": (dict(inputs=x, y_test=y), "must hold x_test and y_test"),
    }
    for name, (arrays, message) in cases.items():
        np.savez(tmp_path / name, **arrays)
        code, seen = _run(capsys, files["model"], str(tmp_path / name), "--eps", "0.1", "--out", str(out))
        assert code == 2 and message in seen.err, (name, seen.err)
    (tmp_path / "fake.keras").write_text("not a model")
    code, seen = _run(capsys, str(tmp_path / "fake.keras"), files["data"], "--eps", "0.1", "--out", str(out))
    assert code == 2 and "is not a model Keras can load" in seen.err
    for name, model, message in _not_classifiers():
        model.save(tmp_path / name)
        code, seen = _run(capsys, str(tmp_path / name), files["data"], "--eps", "0.1", "--out", str(out))
        assert code == 2 and message in seen.err, (name, seen.err)
    for args, message in (
        (["--shard", "3/2"], "1 <= K <= N"),
        (["--shard", "0/2"], "1 <= K <= N"),
        (["--shard", "2"], "invalid K/N value: '2'"),
        (
            ["--shard", "1/2", "--batch-size", "0"],
            "`--batch-size` must be an integer >= 1. Received: --batch-size=0",
        ),
        (["--shard", "1/9", "--batch-size", "16"], "`--shard` must be at most the number of blocks of 16"),
        (["--eps", "-0.1"], "`--eps` must be comma-separated numbers >= 0"),
        (["--eps", "8/0"], "Received: --eps 8/0 (8/0 has a zero denominator)"),
        (["--eps", "0.1,junk"], "Received: --eps 0.1,junk ('junk' is not a number)"),
        (["--attacks", "cw"], "`--attacks` must be comma-separated names from apgd-ce, "),
        (["--attacks", "standard"], "AutoAttack's standard cascade is --version standard"),
        (["--attacks", "fgsm/bad"], "item 0 of `--attacks` must be"),
        (["--attacks", "fgsm", "--version", "plus"], "give --attacks or --version, not both. Received: "),
        (
            ["--attacks", "fgsm,fgsm"],
            "`--attacks` must be a list without repeated names. Received: --attacks=",
        ),
        (
            ["--clip-values", "1,0"],
            "`--clip-values` must be lo,hi: the input range, two finite numbers with lo < hi",
        ),
        (["--clip-values", "0,1,2"], "Received: --clip-values 0,1,2"),
        (["--clip-values", "-inf,1"], "Received: --clip-values -inf,1"),
        (["--seed", "-1"], "`--seed` must be an integer >= 0. Received: --seed=-1"),
        (["--steps", "0"], "`--steps` must be an integer >= 1. Received: --steps=0"),
        (["--n-queries", "0"], "`--n-queries` must be an integer >= 1. Received: --n-queries=0"),
        (["--eot-iter", "0"], "`--eot-iter` must be an integer >= 1. Received: --eot-iter=0"),
        (["--n-points", "-3"], "`--n-points` must be an integer >= 1. Received: --n-points=-3"),
        (["--state", "."], "`--state` must be a file path, not a folder. Received: --state='.'"),
        (["--model-fn", "nowhere:build"], "names nothing importable"),
        (["--n-classes", "4"], "`--n-classes` is for --model-fn only"),
    ):
        code, seen = _run(capsys, files["model"], files["data"], "--eps", "0.1", *args, "--out", str(out))
        assert code == 2 and message in seen.err, (args, seen.err)
    assert not out.exists()


def _not_classifiers():
    """Models whose output is not one score per class: a spatial output, a one-unit regression, four
    regression targets."""
    spatial = keras.Sequential([keras.Input((6,)), keras.layers.Reshape((2, 3, 1)), keras.layers.Dense(4)])
    regression = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
    regression.compile(loss="mse")
    heads = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="heads")])
    heads.compile(loss="mse")  # four regression targets: four units that are no class scores
    return [
        ("spatial.keras", spatial, "gives one score per class, shaped (batch, n_classes)"),
        ("regression.keras", regression, "compiled with the regression loss 'mean_squared_error'"),
        (
            "heads.keras",
            heads,
            "values are 4 regression targets, not scores of 4 classes",
        ),
    ]


def test_model_fn_takes_the_classes_of_all_of_data_or_n_classes(capsys, files, tmp_path, monkeypatch):
    """The first points' labels may lack the top class: --model-fn builds for all of DATA's labels (or
    --n-classes), so the weights load; a wrong --n-classes names the shape it built."""
    keras.saving.load_model(files["model"]).save_weights(tmp_path / "model.weights.h5")
    (tmp_path / "mynet.py").write_text(
        "import keras\n"
        "def build(input_shape, n_classes):\n"
        "    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(32, activation='relu'),\n"
        "                             keras.layers.Dense(n_classes, activation='softmax')])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    order = np.argsort(files["y"], kind="stable")  # label 3 last: the first points hold none
    np.savez(tmp_path / "sorted.npz", x_test=files["x"][order], y_test=files["y"][order])
    first = int(np.sum(files["y"] < 3))
    weights, data = str(tmp_path / "model.weights.h5"), str(tmp_path / "sorted.npz")
    args = [weights, data, "--eps", "0.1", "--model-fn", "mynet:build", "--n-points", str(first)]
    code, seen = _run(capsys, *args, *ATTACK, "--out", str(tmp_path / "a"))
    assert first >= 16 and code == 0, seen.err
    code, seen = _run(capsys, *args, "--n-classes", "5", *ATTACK, "--out", str(tmp_path / "b"))
    assert code == 2 and "built for input shape (6,) and 5 classes" in seen.err, seen.err


def test_state_resumes_without_rerunning_attacks(capsys, files, tmp_path, monkeypatch):
    args = [files["model"], files["data"], "--eps", "0.1", "--attacks", "apgd-ce", *ATTACK]
    state = str(tmp_path / "state.json")
    assert _run(capsys, *args, "--state", state, "--out", str(tmp_path / "a"))[0] == 0

    def refuse(*args, **kwargs):
        raise AssertionError("a finished attack ran again")

    monkeypatch.setattr(gradkit.attacks, "run_attack", refuse)
    assert _run(capsys, *args, "--state", state, "--out", str(tmp_path / "b"))[0] == 0
    assert (tmp_path / "a" / "samples.csv").read_text() == (tmp_path / "b" / "samples.csv").read_text()


def test_a_two_class_model_reports_the_skipped_attacks_like_python(capsys, tmp_path):
    """Issue 44: a 2-class model under "version standard" skips APGD-T and FAB-T; the printed header and
    rows, evaluation.json (top level and per result) and a merge of --shard parts say so, as
    `Evaluation.summary()` does."""
    x, y = _data(24)
    y = (y % 2).astype("int64")  # class 1 iff x0 > 0.5
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    kernel = np.zeros((6, 2), "float32")
    kernel[0] = [-4, 4]  # logit 1 - logit 0 = 8 (x0 - 0.5)
    model.set_weights([kernel, np.array([2, -2], "float32")])
    model.save(tmp_path / "two.keras")
    np.savez(tmp_path / "two.npz", x=x, y=y)
    args = [str(tmp_path / "two.keras"), str(tmp_path / "two.npz"), "--eps", "0.05", "--batch-size", "8"]
    args += ["--steps", "2", "--n-queries", "10", "--no-progress"]
    code, seen = _run(capsys, *args, "--out", str(tmp_path / "one"))
    assert code == 0, seen.err
    ev = gradkit.evaluate(model, x, y, eps=0.05, clip_values=(0, 1), batch_size=8, steps=2, n_queries=10,
                          verbose=0)  # fmt: skip
    skipped = [["apgd-t", "needs at least 4 classes; the model has 2"],
               ["fab-t", "needs at least 3 classes; the model has 2"]]  # fmt: skip
    assert ev.skipped == skipped and ev.clean_accuracy == 1.0
    printed, expected = seen.out.splitlines(), ev.summary().splitlines()
    assert printed[0] == expected[0] and printed[0].endswith("version standard (apgd-t, fab-t skipped)")
    rows = [line for line in printed if "skipped:" in line]
    assert len(rows) == 2 and rows == [line for line in expected if "skipped:" in line]
    for k in (1, 2):
        assert _run(capsys, *args, "--shard", f"{k}/2", "--out", str(tmp_path / f"part{k}"))[0] == 0
    parts = [str(tmp_path / "part1"), str(tmp_path / "part2")]
    code = cli.main(["merge", *parts, "--out", str(tmp_path / "all")])
    assert code == 0 and capsys.readouterr().out.splitlines()[0] == expected[0]
    for folder in ("one", "part1", "all"):
        report = json.loads((tmp_path / folder / "evaluation.json").read_text())
        assert report["skipped"] == report["results"][0]["skipped"] == skipped, folder
        assert list(report["results"][0]["per_attack"]) == ["apgd-ce", "square"]


def test_issue_44_rows_1_and_2_are_flagged_with_the_fix(capsys, tmp_path):
    """A Rescaling(1/255) model: [0, 1] data with --clip-values 0,255 (row 1) and uint8 data with --eps
    8/255 (row 2) exit 0 with the flags that name the fix; the header shows eps against the range."""
    x = np.random.default_rng(0).uniform(0, 1, (32, 6)).astype("float32")
    y = (x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5)
    kernel = np.zeros((6, 4), "float32")
    kernel[0], kernel[1] = [-20, 20, -20, 20], [-20, -20, 20, 20]  # class (u0 > .5) + 2 (u1 > .5), u = x/255
    model = keras.Sequential([keras.Input((6,)), keras.layers.Rescaling(1 / 255), keras.layers.Dense(4)])
    model.layers[-1].set_weights([kernel, -0.5 * kernel.sum(axis=0)])
    model.save(tmp_path / "pixels.keras")
    np.savez(tmp_path / "unit.npz", x=x, y=y)
    np.savez(tmp_path / "uint8.npz", x=np.round(x * 255).astype("uint8"), y=y)
    common = "--clip-values 0,255 --steps 2 --n-queries 10 --batch-size 16 --no-progress".split()
    for data, eps, flags, fix in (
        ("unit", "8", ["near_chance", "data_out_of_range_for_model"], "Multiply the data by 255"),
        ("uint8", "8/255", ["eps_large"], "pass eps=8 (CLI: --eps 8)"),
    ):
        out = tmp_path / data
        args = [str(tmp_path / "pixels.keras"), str(tmp_path / f"{data}.npz"), "--eps", eps, *common]
        code, seen = _run(capsys, *args, "--out", str(out))
        assert code == 0, seen.err
        report = json.loads((out / "evaluation.json").read_text())
        assert [f["name"] for f in report["flags"]] == flags, report["flags"]
        assert fix in " ".join(f["message"] for f in report["flags"])
        assert all(f["reference"] for f in report["flags"]) and f"[{flags[0]}]" in seen.out
        assert report["scale"]["range"] == [0.0, 255.0] and report["scale"]["model_range"] == pytest.approx(
            [0, 255]
        )
        assert "of the range [0, 255])" in seen.out.splitlines()[0]
    assert report["clean_accuracy"] == report["robust_accuracy"] == 1.0  # row 2: no point moved
    assert report["scale"]["eps_of_range"] == pytest.approx(8 / 255**2)


@pytest.mark.parametrize("command", ["evaluate", "merge"])
def test_help_imports_no_keras_and_no_backend(command):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gradkit", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--out" in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "gradkit.cli._evaluate" in imported
    assert not [name for name in imported if name.split(".")[0] in {"keras", "tensorflow", "jax", "torch"}]


def test_a_negative_clip_value_parses_without_equals_and_evaluates_as_python(capsys, files, tmp_path):
    out = tmp_path / "out"
    args = [files["model"], files["data"], "--eps", "0.15", "--attacks", "fgsm", "--clip-values", "-4,14"]
    code, seen = _run(capsys, *args, *ATTACK, "--out", str(out))
    assert code == 0, seen.err
    model = keras.saving.load_model(files["model"])
    options = {**OPTIONS, "clip_values": (-4.0, 14.0), "attacks": ["fgsm"]}
    expected = gradkit.evaluate(model, files["x"], files["y"], eps=0.15, **options)
    assert [r["robust"] == "1" for r in _samples(out)] == expected.robust.tolist()
    report = json.loads((out / "evaluation.json").read_text())
    assert report["settings"]["clip_values"] == [-4.0, 14.0]


def test_a_model_of_two_outputs_exits_2_naming_model_and_no_option_it_lacks(capsys, files, tmp_path):
    inp = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="tanh")(inp)
    keras.Model(inp, [keras.layers.Dense(1)(hidden), keras.layers.Dense(4)(hidden)]).save(
        tmp_path / "two.keras"
    )
    out = tmp_path / "out"
    code, seen = _run(capsys, str(tmp_path / "two.keras"), files["data"], "--eps", "0.1", "--out", str(out))
    assert code == 2 and "`MODEL` must have one output: evaluate attacks one classifier head" in seen.err
    assert "keras.Model(model.inputs, model.outputs[1])" in seen.err and "output=" not in seen.err
    assert not out.exists()


def test_a_model_of_two_inputs_exits_2_with_the_one_input_model_to_save(capsys, files, tmp_path):
    a, b = keras.Input((4,)), keras.Input((2,))
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([a, b]))
    keras.Model([a, b], keras.layers.Dense(4)(hidden)).save(tmp_path / "two.keras")
    out = tmp_path / "out"
    code, seen = _run(capsys, str(tmp_path / "two.keras"), files["data"], "--eps", "0.1", "--out", str(out))
    assert code == 2 and "`MODEL` must have one input: evaluate attacks models of one input array" in seen.err
    assert "model([one[:, 0:4], one[:, 4:6]])" in seen.err and "wrapped.save('one.keras')" in seen.err
    assert "input array(s)" not in seen.err and not out.exists()


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_torchrun_without_the_torch_backend_exits_2_in_one_line_before_keras(backend, tmp_path):
    """Each process refuses before importing Keras (or TensorFlow next to torch): rank 0 says why in one
    line, the others exit 2 silently, so torchrun's dump is not the first thing read."""
    out = tmp_path / "out"
    for rank, said in (("0", True), ("1", False)):
        env = {**os.environ, "WORLD_SIZE": "2", "LOCAL_RANK": rank, "RANK": rank, "KERAS_BACKEND": backend}
        command = ["-X", "importtime", "-m", "gradkit", "evaluate", "m.keras", "d.npz", "--eps", "0.1"]
        proc = subprocess.run(
            [sys.executable, *command, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        lines = [line for line in proc.stderr.splitlines() if "import time:" not in line]
        imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
        assert proc.returncode == 2 and not out.exists()
        assert not [
            name for name in imported if name.split(".")[0] in {"keras", "tensorflow", "jax", "torch"}
        ]
        expected = [
            "gradkit evaluate: error: torchrun's processes (WORLD_SIZE, LOCAL_RANK set) need the torch "
            "backend: run KERAS_BACKEND=torch torchrun ... gradkit evaluate ... "
            f"Received: KERAS_BACKEND={backend}"
        ]
        assert lines == (expected if said else []), proc.stderr[-2000:]


class _Counted:
    """`gradkit.attacks.run_attack` that records `(eps, attack, seed)` per call (one call per block and
    attack: its seed is `--seed` + the block), optionally raising KeyboardInterrupt (Ctrl-C) at one call."""

    real = staticmethod(gradkit.attacks.run_attack)

    def __init__(self, stop_at=None):
        self.calls, self.stop_at = [], stop_at

    def __call__(self, name, *args, **kwargs):
        self.calls.append((kwargs["eps"], name, kwargs["seed"]))
        if self.calls[-1] == self.stop_at:
            raise KeyboardInterrupt
        return self.real(name, *args, **kwargs)


def test_interrupted_run_resumes_at_its_next_block_with_the_same_samples(
    capsys, files, tmp_path, monkeypatch
):
    """Ctrl-C on the second block of eps 0.15's second attack: the rerun of the same command redoes no
    finished block, says what it reused, and writes the samples.csv of an uninterrupted run."""
    args = [files["model"], files["data"], "--eps", "0.1,0.15", "--attacks", "apgd-ce,apgd-t", *ATTACK]
    whole = _Counted()
    monkeypatch.setattr(gradkit.attacks, "run_attack", whole)
    assert _run(capsys, *args, "--out", str(tmp_path / "whole"))[0] == 0
    late = [c for c in whole.calls if c[:2] == (0.15, "apgd-t")]
    assert len(whole.calls) == len(set(whole.calls)) and len(late) >= 2  # blocks of 16 rows: seeds 3, 4, 5
    out = tmp_path / "out"
    monkeypatch.setattr(gradkit.attacks, "run_attack", _Counted(stop_at=whole.calls[0]))
    code, seen = _run(capsys, *args, "--out", str(out))
    assert code == 130 and "interrupted before any attack finished a block: nothing to resume." in seen.err
    assert not out.exists()
    first = _Counted(stop_at=late[1])
    monkeypatch.setattr(gradkit.attacks, "run_attack", first)
    code, seen = _run(capsys, *args, "--out", str(out))
    assert code == 130 and first.calls[-1] == late[1]
    kept = f"interrupted; state kept in {out / 'state'}: rerun the same command to resume."
    assert seen.err.strip().endswith(kept)
    assert not (out / "samples.csv").exists()
    rest = _Counted()
    monkeypatch.setattr(gradkit.attacks, "run_attack", rest)
    code, seen = _run(capsys, *args, "--out", str(out))
    assert code == 0, seen.err
    assert rest.calls == whole.calls[len(first.calls) - 1 :]  # the interrupted block and the ones after it
    assert (out / "samples.csv").read_text() == (tmp_path / "whole" / "samples.csv").read_text()
    blocks = {(eps, name): sum(c[:2] == (eps, name) for c in whole.calls) for eps, name, _ in whole.calls}
    held = (
        f"resumed from {out / 'state'}: eps 0.1: apgd-ce done ({blocks[0.1, 'apgd-ce']} blocks), apgd-t done "
        f"({blocks[0.1, 'apgd-t']} blocks); eps 0.15: apgd-ce done ({blocks[0.15, 'apgd-ce']} blocks), "
        f"apgd-t 1 of {blocks[0.15, 'apgd-t']} blocks; nothing finished was redone."
    )
    assert held in seen.err
    again = _Counted()  # finished: the same command again attacks nothing
    monkeypatch.setattr(gradkit.attacks, "run_attack", again)
    assert _run(capsys, *args, "--out", str(out))[0] == 0 and again.calls == []


def test_a_changed_command_in_the_same_out_names_what_changed(capsys, files, tmp_path):
    args = [files["model"], files["data"], "--eps", "0.1", "--attacks", "fgsm", *ATTACK]
    out = tmp_path / "out"
    assert _run(capsys, *args, "--out", str(out))[0] == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for change, named in (
        (["--seed", "4"], "--seed"),
        (["--eps", "0.2"], "--eps"),
        (["--n-points", "40"], "--n-points"),
        (["--steps", "5", "--clip-values=-1,2"], "--steps, --clip-values"),
    ):
        code, seen = _run(capsys, *args, *change, "--out", str(out))
        assert code == 2, seen.err
        assert (
            f"{out / 'state'} holds the state of another evaluation (changed: {named}). To start afresh, use "
            "another --out, or delete it." in seen.err
        ), seen.err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing written
    state = str(tmp_path / "mine.json")
    assert _run(capsys, *args, "--state", state, "--out", str(out))[0] == 0  # another state: a fresh start
    code, seen = _run(capsys, *args, "--seed", "4", "--state", state, "--out", str(out))
    assert code == 2 and f"{state} holds the state of another evaluation (changed: --seed)" in seen.err
    assert "use another --state, or delete it and its .npz files" in seen.err


def test_certify_adds_a_certified_column_that_shards_and_merge_keep(capsys, files, tmp_path):
    """--certify crown: samples.csv's certified column equals gradkit.certify point for point, it never
    exceeds robust, evaluation.json holds the certified accuracy, and two merged shards equal one run."""
    args = [files["model"], files["data"], "--eps", "0.02,0.05", "--attacks", "apgd-ce", "--certify", "crown"]
    code, seen = _run(capsys, *args, *ATTACK, "--out", str(tmp_path / "one"))
    assert code == 0, seen.err
    assert "certified accuracy" in seen.out
    rows = _samples(tmp_path / "one")
    model = keras.saving.load_model(files["model"])
    direct = gradkit.certify(model, files["x"], files["y"], 0.05, method="crown", clip_values=(0, 1))
    assert [r["certified"] == "1" for r in rows] == direct.certified.tolist()
    assert all(r["robust"] == "1" for r in rows if r["certified"] == "1")
    small = gradkit.certify(model, files["x"], files["y"], 0.02, method="crown", clip_values=(0, 1))
    expected = ["0.05" if c else "0.02" if s else "" for c, s in zip(direct.certified, small.certified)]
    assert [r["certified_up_to_eps"] for r in rows] == expected
    report = json.loads((tmp_path / "one" / "evaluation.json").read_text())
    assert report["certified_accuracy"] == pytest.approx(direct.certified_accuracy)
    assert report["certified_accuracy"] <= report["robust_accuracy"]
    for k in (1, 2):
        assert _run(capsys, *args, *ATTACK, "--shard", f"{k}/2", "--out", str(tmp_path / f"p{k}"))[0] == 0
    code = cli.main(["merge", str(tmp_path / "p1"), str(tmp_path / "p2"), "--out", str(tmp_path / "all")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "all" / "samples.csv").read_text() == (tmp_path / "one" / "samples.csv").read_text()


def test_certify_refuses_l1_naming_the_flag(capsys, files, tmp_path):
    out = tmp_path / "out"
    args = [
        files["model"],
        files["data"],
        "--eps",
        "0.1",
        "--norm",
        "l1",
        "--certify",
        "ibp",
        "--out",
        str(out),
    ]
    code, seen = _run(capsys, *args, *ATTACK)
    assert code == 2 and "--certify" in seen.err and "Linf and L2" in seen.err and not out.exists()


def test_check_convergence_reruns_and_flags_as_python(capsys, files, tmp_path):
    out, args = (
        tmp_path / "out",
        ["--attacks", "apgd-ce", "--steps", "1", "--batch-size", "16", "--no-progress"],
    )
    code, seen = _run(capsys, files["model"], files["data"], "--eps", "0.15", "--out", str(out), *args,
                      "--check-convergence")  # fmt: skip
    assert code == 0, seen.err
    model = keras.saving.load_model(files["model"])
    options = dict(attacks="apgd-ce", steps=1, clip_values=(0, 1), batch_size=16, verbose=0)
    expected = gradkit.evaluate(model, files["x"], files["y"], eps=0.15, check_convergence=True, **options)
    report = json.loads((out / "evaluation.json").read_text())
    assert list(report["results"][0]["per_attack"]) == ["apgd-ce", "apgd-ce (x2)"]
    assert report["robust_accuracy"] == expected.robust_accuracy
    assert [r["broken_by"] or None for r in _samples(out)] == expected.broken_by
    assert [f["name"] for f in report["flags"]] == [f["name"] for f in expected.flags]
    assert "still_improving" in [f["name"] for f in expected.flags]  # one step: its loss still rose


def test_per_feature_clip_values_and_a_mask_from_files_evaluate_as_python(capsys, files, tmp_path):
    lo, hi = np.zeros(6, np.float32), np.linspace(0.9, 1.0, 6).astype(np.float32)
    mask = np.array([1, 1, 0, 1, 0, 1], np.float32)
    x = np.minimum(files["x"], hi)
    np.savez(tmp_path / "data.npz", x=x, y=files["y"])
    np.save(tmp_path / "lo.npy", lo), np.save(tmp_path / "hi.npy", hi), np.save(tmp_path / "mask.npy", mask)
    np.savez(tmp_path / "box.npz", lo=lo, hi=hi)
    model = keras.saving.load_model(files["model"])
    options = {**OPTIONS, "clip_values": (lo, hi), "attacks": ["apgd-ce"], "mask": mask}
    expected = gradkit.evaluate(model, x, files["y"], eps=0.2, **options)
    assert 0 < expected.robust.sum() < expected.robust.size
    for i, box in enumerate((f"{tmp_path / 'lo.npy'},{tmp_path / 'hi.npy'}", str(tmp_path / "box.npz"))):
        out = tmp_path / f"out{i}"
        args = [files["model"], str(tmp_path / "data.npz"), "--eps", "0.2", "--attacks", "apgd-ce"]
        args += ["--clip-values", box, "--mask", str(tmp_path / "mask.npy"), *ATTACK, "--out", str(out)]
        code, seen = _run(capsys, *args)
        assert code == 0, seen.err
        assert [r["robust"] == "1" for r in _samples(out)] == expected.robust.tolist()


def test_a_model_of_several_inputs_reads_one_array_per_input_name(capsys, files, tmp_path):
    keras.utils.set_random_seed(0)
    a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([a, b]))
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(4)(hidden))
    model.save(tmp_path / "two.keras")
    x = {"a": files["x"][:, :4], "b": files["x"][:, 4:]}
    np.savez(tmp_path / "two.npz", y=files["y"], **x)
    out = tmp_path / "out"
    args = [str(tmp_path / "two.keras"), str(tmp_path / "two.npz"), "--eps", "0.3", "--attacks", "apgd-ce"]
    code, seen = _run(capsys, *args, "--attack-inputs", "a", *ATTACK, "--out", str(out))
    assert code == 0, seen.err
    options = {**OPTIONS, "attacks": ["apgd-ce"], "attack_inputs": ["a"]}
    expected = gradkit.evaluate(model, x, files["y"], eps=0.3, **options)
    assert [r["robust"] == "1" for r in _samples(out)] == expected.robust.tolist()
    np.testing.assert_array_equal(expected.x_adv["b"], x["b"])
