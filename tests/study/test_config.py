"""The study's configuration (`gradkit.study.make_config`): its defaults, `quick`, overrides and
refusals."""

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
