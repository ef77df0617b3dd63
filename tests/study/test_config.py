"""The study's configuration (`gradkit.study.make_config`): its defaults, `quick`, overrides and
refusals."""

import json

import pytest

from gradkit import study


def test_make_config_defaults_quick_and_overrides():
    config = study.make_config()
    assert config["epsilons"] == [0.0, 0.02, 0.05, 0.1, 0.2, 0.3] and config["n_estimators"] == 5
    quick = study.make_config(quick=True, n_estimators=None)
    assert (quick["epsilons"], quick["n_estimators"], quick["epochs"]) == ([0.0, 0.1, 0.3], 2, 3)
    assert config["attacks"] == ["fgsm", "pgd", "standard"] and config["adv_attack"] == "pgd"
    assert (quick["apgd_steps"], quick["square_queries"]) == (5, 100)
    every = study.make_config(attacks=["standard", "apgd-t", "square", "apgd-ce", "fgsm", "pgd"])
    assert every["attacks"] == ["standard", "apgd-t", "square", "apgd-ce", "fgsm", "pgd"]
    mixed = study.make_config(quick=True, epsilons=(0.2, 0, 0.2, 0.05), attacks=["pgd", "pgd"], epochs=1)
    assert mixed["epsilons"] == [0.0, 0.05, 0.2] and mixed["attacks"] == ["pgd"] and mixed["epochs"] == 1
    assert list(config) == list(study.DEFAULTS)
    with pytest.raises(study.ConfigError, match=r"Unknown study options \['eps'\]"):
        study.make_config(eps=[0.1])
    with pytest.raises(study.ConfigError, match="`seed` must be an integer >= 0. Received: seed=True"):
        study.make_config(seed=True)
    with pytest.raises(study.ConfigError, match="`epsilons` must be a non-empty list"):
        study.make_config(epsilons="0.1")
    with pytest.raises(study.ConfigError, match="`quick` must be True or False"):
        study.make_config(quick="yes")


def test_certify_is_checked_and_stored_only_when_set():
    from gradkit.study import _config

    assert study.make_config()["certify"] is None and study.DEFAULTS["certify"] is None
    assert study.make_config(certify="crown", norm="l2")["certify"] == "crown"
    plain, certified = study.StudyConfig(), study.StudyConfig(certify="ibp")
    assert "certify" not in plain.to_dict(out=False)  # config.json as before the option existed
    assert certified.to_dict(out=False)["certify"] == "ibp"
    assert list(plain.to_dict(out=False)) == [k for k in study.DEFAULTS if k not in ("out", "certify")]
    assert _config.CERTIFY == ("ibp", "crown-ibp", "crown")
    with pytest.raises(study.ConfigError, match="`certify` must be one of 'ibp', 'crown-ibp', 'crown'"):
        study.make_config(certify="lp")
    with pytest.raises(study.ConfigError, match="`certify` bounds Linf and L2 balls only"):
        study.make_config(certify="ibp", norm="l1")


def test_a_rerun_may_change_certify_and_nothing_else(tmp_path):
    from gradkit.study import _outdir

    old = study.StudyConfig(quick=True).to_dict(out=False)
    (tmp_path / "config.json").write_text(json.dumps({"config": old, "backend": "jax", "data_sha256": "0"}))
    for method in (None, "ibp", "crown"):
        new = study.StudyConfig(quick=True, certify=method).to_dict(out=False)
        _outdir.check_out(str(tmp_path), new, "jax")  # no ConfigError: certificates add to the work
    changed = study.StudyConfig(quick=True, certify="ibp", epochs=1).to_dict(out=False)
    with pytest.raises(study.ConfigError, match="another configuration \\(epochs: 4 -> 1\\)"):
        _outdir.check_out(str(tmp_path), changed, "jax")
    meta = {"config": {**old, "certify": "ibp"}, "backend": "jax", "data_sha256": "0"}
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(study.ConfigError, match="epochs: 4 -> 1"):  # a dropped certify hides no change
        _outdir.check_out(str(tmp_path), study.StudyConfig(quick=True, epochs=1).to_dict(out=False), "jax")
