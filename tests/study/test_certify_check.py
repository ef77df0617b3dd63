"""The study's certified side without training (`gradkit.study._certified`, `_table`): the per-point check
"certified <= worst case", its warning naming model, eps and points, and the table's blocks."""

import pytest

from gradkit import study
from gradkit.study import _certified


def _record(broken, up_to):
    return {"clean": [b != 0.0 for b in broken], "broken": {"worst_case": broken}, "certified": up_to}


def test_check_finds_certified_points_an_attack_broke_and_warns_naming_them():
    # point 0 robust and certified up to 0.2; 1 broken at 0.1 but certified up to 0.1 (a contradiction
    # at 0.1 only); 2 misclassified; 3 broken at 0.2, certified up to 0.1 (fine)
    samples = {"single": _record([None, 0.1, 0.0, 0.2], [0.2, 0.1, None, 0.1]), "adv_single": {"clean": []}}
    checks = _certified.check(samples, [0.0, 0.1, 0.2])
    assert [(c["model"], c["eps"], c["certified"], c["worst_case"], c["contradicted"]) for c in checks] == [
        ("single", 0.0, 0.75, 0.75, []),
        ("single", 0.1, 0.75, 0.5, [1]),
        ("single", 0.2, 0.25, 0.25, []),
    ]
    told = []
    with pytest.warns(RuntimeWarning, match="single: 1 test points certified by crown at eps 0.1"):
        (warning,) = _certified.contradiction_warnings(checks, "crown", told.append)
    assert (warning["model"], warning["attack"], warning["eps"]) == ("single", "certified", 0.1)
    assert warning["name"] == "certificate_contradicted" and "(indices 1)" in warning["message"]
    assert told == [f"warning: single: {warning['message']}"]

    config = {**study.make_config(quick=True), "certify": "crown"}
    rows = [
        {
            "model": "single",
            "attack": a,
            "eps": e,
            "accuracy": v,
            "n_points": 4,
            "ci_low": 0.1,
            "ci_high": 0.9,
        }
        for a, values in (("worst_case", (0.75, 0.5, 0.25)), ("certified", (0.75, 0.75, 0.25)))
        for e, v in zip((0.0, 0.1, 0.3), values)
    ]
    state = {"config": config, "backend": "jax", "dataset": "digits", "n_train": 8, "n_test": 4, "models": {},
             "results": rows, "certified_checks": checks, "warnings": [warning]}  # fmt: skip
    lines = study.format_table(state).splitlines()
    top = lines.index(
        "check, per point: certified <= worst case (every certified point unbroken by every attack)"
    )
    assert lines[top - 7].startswith("certified accuracy, crown bounds: a lower bound beside the worst case")
    assert lines[top - 5].split()[:2] == ["single", "0.750"]
    assert lines[top + 2].split() == ["single", "0.750", "<=", "0.750", "ok", "0.750:", "1", "BROKEN", "-"]
    assert "  single (certified, eps=0.1): [certificate_contradicted] 1 test points" in "\n".join(lines)
    without = study.format_table({**state, "config": study.make_config(quick=True), "warnings": []})
    assert "certified" not in without and "check, per point" not in without


def test_a_network_without_bound_rules_is_refused_naming_the_model_and_layer():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.LayerNormalization()])
    with pytest.raises(study.ConfigError, match="`certify`='ibp' cannot bound the model single: .*LayerNorm"):
        _certified.check_bounds(model, "single", "ibp")
    _certified.check_bounds(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]), "single", "crown")
