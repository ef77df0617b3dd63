"""`gradkit study --norm linf|l2|l1` (`gradkit.study._norms`): the per-norm defaults, the attacks at the
study's norm (on the two-class models of `oracles.linear`, whose minimal perturbations have a closed
form), the outputs that name the norm, and the refusal to resume at another norm. No study is trained
here."""

import csv
import json
import math

import numpy as np
import pytest

from gradkit import study
from gradkit.study import _attack, _outdir, _run, _train
from gradkit.study._attack import WORST
from gradkit.study._table import header
from oracles.linear import X, curved, exact, labels, labels_of


def test_each_norm_has_its_defaults_and_spellings():
    assert study.DEFAULTS["norm"] == "linf" and study.DEFAULTS["epsilons"] == [0.0, 0.02, 0.05, 0.1, 0.2, 0.3]
    l2, l1 = study.make_config(norm="L2"), study.make_config(norm=1)
    assert (l2["norm"], l2["epsilons"], l2["adv_eps"]) == ("l2", [0.0, 0.1, 0.25, 0.5, 1.0, 2.0], 0.5)
    assert (l1["norm"], l1["epsilons"], l1["adv_eps"]) == ("l1", [0.0, 0.5, 1.0, 2.0, 4.0, 10.0], 0.1)
    assert study.make_config(norm="inf")["norm"] == study.make_config(norm=math.inf)["norm"] == "linf"
    assert study.make_config(norm="l2", quick=True)["epsilons"] == [0.0, 0.5, 1.0]
    assert study.make_config(norm="l1", quick=True, epsilons=[0, 3])["epsilons"] == [0.0, 3.0]  # given wins
    assert study.make_config(norm="l2", attacks=["ddn", "fmn"])["attacks"] == ["ddn", "fmn"]
    with pytest.raises(study.ConfigError, match='`norm` must be "linf", "l2" or "l1". Received: norm=\'l3\''):
        study.make_config(norm="l3")
    with pytest.raises(study.ConfigError, match='holds "ddn", an L2 attack.*norm "l1".*--norm l2'):
        study.make_config(norm="l1", attacks=["fmn", "ddn"])


def test_adversarial_training_runs_at_the_norm_and_at_linf_under_l1():
    assert _train.adversarial(study.StudyConfig(norm="l2"))["norm"] == "l2"  # by name: saved in boost.json
    single = _train.adversarial_single(study.StudyConfig(norm="l1", adv_eps=0.05))
    assert (single["norm"], single["eps"]) == ("linf", 0.05)
    state = {"config": study.make_config(norm="l1"), "models": {}, "backend": "b", "dataset": "digits",
             "n_train": 1, "n_test": 1}  # fmt: skip
    lines = header(state)
    assert "adv_single trains on pgd Linf eps 0.1, 5 steps" in lines[2]
    assert lines[4].startswith("adversarial training at Linf, adv_eps in Linf units") and "L1" in lines[4]
    assert lines[5] == "eps: L1 norm, in input units (inputs scaled to [0, 1])"
    assert "AutoAttack's L1 version" in lines[6]
    fmn = header({**state, "config": study.make_config(norm="l1", attacks=["fmn"], apgd_steps=7)})
    assert fmn[6] == "attacks: fmn 7 steps (minimum-norm, one run per model)"
    l2 = header({**state, "config": study.make_config(norm="l2")})
    assert "pgd L2 eps 0.5" in l2[2] and l2[4] == "eps: L2 norm, in input units (inputs scaled to [0, 1])"


def _toy(norm, attacks, epsilons, **options):
    """The study's attacks at `norm` on the curved two-class model, every eps in turn; (record, rows)."""
    model = curved()
    y = labels(model)
    data = study.Dataset("toy", X, y, X, y, 2)
    config = study.StudyConfig.from_options(norm=norm, attacks=attacks, epsilons=epsilons, **options)
    record = _attack.new_record(labels_of(model, X) == y, config.attacks)
    rows = {eps: _attack.attack_at(model, "m", data, eps, record, config, None)[0] for eps in config.epsilons}
    return record, rows, y


@pytest.mark.parametrize(
    "norm, p, attacks",
    [("l2", 2, ["fmn", "ddn", "pgd"]), ("l1", 1, ["fab", "apgd-ce"])],
)
def test_attacks_run_at_the_study_norm(norm, p, attacks):
    distance = exact(X, labels(curved()), p)  # each point's smallest perturbation in this norm
    eps = float(np.median(distance))
    record, rows, _ = _toy(norm, attacks, [0.0, eps], apgd_steps=100, pgd_steps=20)
    for attack in attacks[:-1]:  # the minimum-norm attacks: per point its norm, in the study's norm
        norms = np.array(record["min_norm"][attack], dtype=float)
        assert (norms >= distance * (1 - 1e-4)).all() and np.median(norms / distance) < 1.01
    worst = np.array([np.inf if b is None else b for b in record["broken"][WORST]])
    gradient = np.array([b is not None for b in record["broken"][attacks[-1]]])
    assert not gradient[distance > eps].any()  # nothing beyond the L2 / L1 ball is broken (a Linf one would)
    assert gradient[distance < 0.7 * eps].all()
    assert ((worst <= eps) == (distance <= eps * 1.01)).all()
    assert all(r["norm"] == norm for r in rows[eps]) and {r["attack"] for r in rows[eps]} == {WORST, *attacks}
    accuracy = {r["attack"]: r["accuracy"] for r in rows[eps]}
    assert accuracy[WORST] == np.mean(worst > eps)


def test_outputs_name_the_norm(tmp_path, monkeypatch):
    config = study.make_config(norm="l2", attacks=["fmn"], epsilons=[0, 0.5], out=str(tmp_path))
    record, rows, y = _toy("l2", ["fmn"], [0.0, 0.5], apgd_steps=5)
    state = _outdir.open_out(str(tmp_path), {k: v for k, v in config.items() if k != "out"}, "b", "0" * 64)
    state.update(n_test=len(y), n_classes=2)
    for name in study.MODELS:
        state["models"][name] = {"clean_accuracy": 1.0, "epochs": 1}
        state["samples"][name], state["grad_norm"][name] = record, [1.0]
        state["results"] += [{**r, "model": name} for eps in rows for r in rows[eps]]
    plots = {}
    monkeypatch.setattr(_run, "plot_robustness", lambda rows, path, **kw: plots.update(kw))
    monkeypatch.setattr(_run, "plot_training_diagnostics", lambda *a, **kw: None)
    _run._write_outputs(state, str(tmp_path), y)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (saved["norm"], saved["adv_norm"], saved["config"]["norm"]) == ("l2", "l2", "l2")
    with open(tmp_path / "results.csv", newline="") as f:
        assert {r["norm"] for r in csv.DictReader(f)} == {"l2"}
    with open(tmp_path / "samples.csv", newline="") as f:
        norms = [r["single_fmn_norm"] for r in csv.DictReader(f)]
    assert norms == ["" if v is None else str(v) for v in record["min_norm"]["fmn"]]
    assert plots["title"].startswith("Robustness (L2)") and plots["xlabel"].startswith("eps (L2 norm")


def test_resuming_at_another_norm_is_refused(tmp_path):
    config = {k: v for k, v in study.make_config(norm="l2").items() if k != "out"}
    (tmp_path / "config.json").write_text(json.dumps({"config": config, "backend": "b"}))
    _outdir.check_out(str(tmp_path), config, "b")  # the same norm resumes
    other = {k: v for k, v in study.make_config(norm="l1").items() if k != "out"}
    with pytest.raises(study.ConfigError, match="at norm 'l2' and this run asks for norm 'l1'.*--norm l2"):
        _outdir.check_out(str(tmp_path), other, "b")
    linf = {k: v for k, v in study.make_config().items() if k != "out"}
    before = {k: v for k, v in linf.items() if k != "norm"}  # a study made before --norm: Linf
    (tmp_path / "config.json").write_text(json.dumps({"config": before, "backend": "b"}))
    _outdir.check_out(str(tmp_path), linf, "b")
    with pytest.raises(study.ConfigError, match="at norm 'linf'"):
        _outdir.check_out(str(tmp_path), config, "b")
