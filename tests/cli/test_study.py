"""`gradkit study` on the command line (`gradkit.cli`): options, `--norm`, exit code 2 with a message
for bad input, `--help`, `--version` and `python -m gradkit`.

None of these tests trains a model: every bad input is refused before the data set is loaded or
anything is written.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from gradkit import cli, study


def _main(capsys, *args):
    code = cli.main(["study", "--no-progress", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--dataset", "cifar100"],
            '`--dataset` must be "digits", "mnist", "fashion_mnist", "cifar10" or a path',
        ),
        (["--epsilons", "0,-0.1"], "`--epsilons` must hold finite numbers >= 0"),
        (["--epsilons", "0,abc"], "argument --epsilons: expected comma-separated floats, got '0,abc'"),
        (["--epsilons", "0,nan"], "`--epsilons` must hold finite numbers >= 0"),
        (["--epsilons", ""], "argument --epsilons"),
        (["--attacks", "fgsm,cw"], '`--attacks` must be a non-empty list of "fgsm", "pgd", "apgd-ce"'),
        (["--apgd-steps", "0"], "`--apgd-steps` must be an integer >= 1"),
        (["--square-queries", "0"], "`--square-queries` must be an integer >= 1"),
        (["--adv-steps", "0"], "`--adv-steps` must be an integer >= 1"),
        (["--adv-attack", "cw"], "argument --adv-attack: invalid choice: 'cw'"),
        (["--adv-mode", "both"], "argument --adv-mode: invalid choice: 'both'"),
        (["--n-estimators", "0"], "`--n-estimators` must be an integer >= 1. Received: --n-estimators=0"),
        (["--epochs", "-2"], "`--epochs` must be an integer >= 1"),
        (["--pgd-steps", "1.5"], "argument --pgd-steps: invalid int value"),
        (["--seed", "0.5"], "argument --seed: invalid int value: '0.5'"),
        (["--seed", "-1"], "`--seed` must be an integer >= 0. Received: --seed=-1"),
        (["--adv-eps", "-1"], "`--adv-eps` must be >= 0. Received: --adv-eps=-1.0"),
        (["--model", "rnn"], '`--model` must be "cnn", "mlp" or "module:function"'),
        (["--model", "no module:build"], '`--model` must be "cnn", "mlp" or "module:function"'),
        (["--dataset", "missing.npz"], "`--dataset` file does not exist"),
        (["--certify", "lirpa"], "argument --certify: invalid choice: 'lirpa'"),
        (["--certify", "crown", "--norm", "l1"], "`--certify` bounds Linf and L2 balls only"),
    ],
)
def test_bad_options_exit_2_with_a_message_and_write_nothing(capsys, tmp_path, args, message):
    out = tmp_path / "out"
    code, err = _main(capsys, "--out", str(out), *args)
    assert code == 2
    assert message in err
    assert not out.exists()


def test_unusable_out_directories(capsys, tmp_path):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    code, err = _main(capsys, "--out", str(afile))
    assert code == 2 and "`--out` must be a directory" in err
    code, err = _main(capsys, "--out", str(afile / "sub"))
    assert code == 2 and "`--out` must be a writable directory" in err
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    code, err = _main(capsys, "--out", str(foreign))
    assert code == 2 and "holds files but no config.json" in err
    assert os.listdir(foreign) == ["notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only directories")
def test_read_only_parent(capsys, tmp_path):
    tmp_path.chmod(0o500)
    try:
        code, err = _main(capsys, "--out", str(tmp_path / "out"))
    finally:
        tmp_path.chmod(0o700)
    assert code == 2 and "writable" in err


def test_mnist_offline_exit_2(capsys, tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("URL fetch failure: no network")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", offline)
    code, err = _main(capsys, "--dataset", "mnist", "--out", str(tmp_path / "out"))
    assert code == 2 and "Could not load MNIST" in err and "no network" in err
    assert not (tmp_path / "out").exists()


def test_bad_npz_and_cnn_on_flat_features_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x_train=np.zeros((4, 3)), y_train=[0, 1, 0, 1], x_test=np.zeros((2, 5)), y_test=[0, 1])
    code, err = _main(capsys, "--dataset", str(bad), "--out", str(tmp_path / "a"))
    assert code == 2 and "same feature shape" in err and not (tmp_path / "a").exists()
    flat = tmp_path / "flat.npz"
    np.savez(flat, x_train=np.zeros((4, 3)), y_train=[0, 1, 0, 1], x_test=np.zeros((2, 3)), y_test=[0, 1])
    code, err = _main(capsys, "--dataset", str(flat), "--out", str(tmp_path / "b"))
    assert code == 2 and 'use --model="mlp"' in err and not (tmp_path / "b").exists()


def test_help_and_missing_subcommand(capsys):
    assert cli.main(["study", "--help"]) == 0
    text = capsys.readouterr().out
    for option in (
        "--dataset",
        "--epsilons",
        "--attacks",
        "--n-estimators",
        "--quick",
        "--pgd-steps",
        "--apgd-steps",
        "--square-queries",
        "--adv-attack",
        "--adv-steps",
        "--adv-mode",
        "adv_single",
        "cifar10",
        "fashion_mnist",
        "standard",
        "--out",
    ):
        assert option in text
    assert cli.main([]) == 2
    assert "required: command" in capsys.readouterr().err


def test_console_script_exit_code():
    script = os.path.join(os.path.dirname(sys.executable), "gradkit")
    if not os.path.exists(script):
        pytest.skip("the gradkit console script is not installed in this environment")
    proc = subprocess.run([script, "study", "--epsilons", "-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "`--epsilons` must hold finite numbers >= 0" in proc.stderr


def test_python_dash_m_runs_the_same_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "gradkit", "study", "--epsilons", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "`--epsilons` must hold finite numbers >= 0" in proc.stderr


def test_devices_needs_jax_and_existing_devices(capsys, tmp_path):
    out = tmp_path / "run"
    code, err = _main(capsys, "--quick", "--devices", "64", "--out", str(out))
    assert code == 2
    if keras.backend.backend() == "jax":
        assert "more devices than exist" in err
    else:
        assert "needs the JAX backend" in err
    assert not out.exists()
    code, err = _main(capsys, "--quick", "--devices", "0", "--out", str(out))
    assert code == 2 and ">= 1" in err


def test_no_arguments_prints_usage_and_points_to_help(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gradkit") and "gradkit --help" in err
    assert cli.main(["study", "--epsilons", "0,abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gradkit study") and "gradkit study --help" in err


def test_version(capsys):
    import gradkit

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"gradkit {gradkit.__version__}\n"


def test_help_imports_no_keras_and_no_backend():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gradkit", "study", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--epsilons" in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "gradkit.cli" in imported
    heavy = {"keras", "tensorflow", "jax", "jaxlib", "torch"}
    assert not [name for name in imported if name.split(".")[0] in heavy]


def test_adversarial_options_reach_the_study_configuration(capsys, tmp_path, monkeypatch):
    seen = {}

    def stop(options, **kwargs):
        seen.update(study.make_config(**options))
        raise study.ConfigError("stopped by the test")

    monkeypatch.setattr(study, "run_study", stop)
    args = ["--adv-mode", "fit", "--adv-attack", "fgsm", "--adv-eps", "0.2", "--adv-steps", "3"]
    code, err = _main(capsys, "--out", str(tmp_path / "out"), *args)
    assert code == 2 and "stopped by the test" in err
    given = (seen["adv_mode"], seen["adv_attack"], seen["adv_eps"], seen["adv_steps"])
    assert given == ("fit", "fgsm", 0.2, 3)
    assert study.make_config()["adv_mode"] == "augment"


def test_command_line_norm(capsys, tmp_path, monkeypatch):
    code, err = _main(capsys, "--norm", "l3", "--out", str(tmp_path / "a"))
    assert code == 2 and "argument --norm: invalid choice: 'l3'" in err and not (tmp_path / "a").exists()
    code, err = _main(capsys, "--attacks", "ddn", "--out", str(tmp_path / "b"))  # Linf by default
    assert code == 2 and '"ddn", an L2 attack' in err and not (tmp_path / "b").exists()
    seen = {}

    def stop(options, **kwargs):
        seen.update(study.make_config(**options))
        raise study.ConfigError("stopped by the test")

    monkeypatch.setattr(study, "run_study", stop)
    code, err = _main(capsys, "--norm", "L2", "--attacks", "fmn,ddn", "--out", str(tmp_path / "c"))
    assert code == 2 and "stopped by the test" in err
    l2 = list(study.DEFAULT_EPSILONS["l2"])
    assert (seen["norm"], seen["epsilons"], seen["adv_eps"]) == ("l2", l2, 0.5)
    assert cli.main(["study", "--help"]) == 0
    assert "--norm {linf,l2,l1}" in capsys.readouterr().out


def test_certify_reaches_the_study_configuration(capsys, tmp_path, monkeypatch):
    from gradkit import certificates

    seen = {}

    def stop(options, **kwargs):
        seen.update(study.make_config(**options))
        raise study.ConfigError("stopped by the test")

    monkeypatch.setattr(study, "run_study", stop)
    code, err = _main(capsys, "--certify", "crown-ibp", "--norm", "l2", "--out", str(tmp_path / "out"))
    assert (
        code == 2 and "stopped by the test" in err and (seen["certify"], seen["norm"]) == ("crown-ibp", "l2")
    )
    _main(capsys, "--out", str(tmp_path / "out"))
    assert seen["certify"] is None  # no certificates unless asked
    assert cli.main(["study", "--help"]) == 0
    assert "--certify {" + ",".join(certificates.METHODS) + "}" in capsys.readouterr().out
