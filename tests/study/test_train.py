"""The study's adversarial settings (`gradkit.study._train`) without training: adv_mode, adv_single's
arguments, the header, resume."""

import json

import pytest

from gradkit import study
from gradkit.study import _outdir, _train
from gradkit.study._table import header


def test_adv_mode_option_is_checked():
    assert study.make_config()["adv_mode"] == study.DEFAULTS["adv_mode"] in ("augment", "fit")
    assert study.make_config(adv_mode="fit")["adv_mode"] == "fit"
    assert study.MODELS == ("single", "adv_single", "adaboost_m1", "adv_boost")
    with pytest.raises(study.ConfigError, match=r"`adv_mode` must be one of 'augment', 'fit'"):
        study.make_config(adv_mode="madry")


def test_adv_single_and_adv_boost_share_the_attack_settings():
    config = study.StudyConfig(adv_eps=0.2, adv_steps=4, seed=3, adv_mode="fit")
    boost = _train.adversarial(config)
    assert boost == {"attack": "pgd", "eps": 0.2, "norm": "linf", "clip_values": (0.0, 1.0), "steps": 4,
                     "eps_step": pytest.approx(0.125), "seed": 3, "mode": "fit"}  # fmt: skip
    single = _train.adversarial_single(config)
    assert single == {**{k: v for k, v in boost.items() if k != "mode"}, "random_start": True}
    fast = _train.adversarial_single(study.StudyConfig(adv_attack="fgsm"))  # fast FGSM, random start
    assert fast == {"attack": "fgsm", "eps": 0.1, "norm": "linf", "clip_values": (0.0, 1.0),
                    "random_start": True, "seed": 0}  # fmt: skip


def _state(**options):
    config = study.make_config(**options)
    models = {
        "single": {"epochs": 20, "clean_accuracy": 0.98},
        "adv_single": {"epochs": 20, "clean_accuracy": 0.99},
    }
    models["adv_boost"] = {"epochs": 4, "members": 5, "asked": 5, "clean_accuracy": 0.98}
    return {
        "config": config,
        "models": models,
        "backend": "b",
        "dataset": "digits",
        "n_train": 1,
        "n_test": 1,
    }


def test_header_says_how_each_adversarial_model_was_trained():
    lines = header(_state(adv_mode="augment"))
    assert lines[1] == ("training: single 20 epochs; adv_single 20 epochs; adv_boost 5/5 members x 4 epochs "
                        "(round 1 trains twice: clean, then adversarial)")  # fmt: skip
    single = "adv_single trains on pgd Linf eps 0.1, 5 steps examples made inside fit"
    assert lines[2] == f"{single} (gradkit.adversarial_training)"
    assert lines[3].startswith(
        "adv_boost rounds (augment mode) train on pgd Linf eps 0.1, 5 steps examples made against"
    )
    assert lines[-1] == "clean accuracy: single 0.980, adv_single 0.990, adv_boost 0.980"
    fit = header(_state(adv_mode="fit", adv_attack="fgsm"))
    assert "trains twice" not in fit[1]
    single = "adv_single trains on fgsm Linf eps 0.1 (random start) examples made inside fit"
    assert fit[2] == f"{single} (gradkit.adversarial_training)"
    assert fit[3].startswith(
        "adv_boost rounds (fit mode) train on fgsm Linf eps 0.1 (random start) examples made inside fit"
    )


def test_a_study_made_before_adv_mode_resumes_as_augment(tmp_path):
    config = study.make_config()
    config.pop("out")
    old = {k: v for k, v in config.items() if k != "adv_mode"}
    (tmp_path / "config.json").write_text(json.dumps({"config": old, "backend": "b"}))
    _outdir.check_out(str(tmp_path), {**config, "adv_mode": "augment"}, "b")  # no error: it was augment
    with pytest.raises(study.ConfigError, match="adv_mode: 'augment' -> 'fit'"):
        _outdir.check_out(str(tmp_path), {**config, "adv_mode": "fit"}, "b")
