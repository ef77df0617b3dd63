"""Units and scale (`gradkit.evaluation._scale`, issue 44): the input range the model's first layers imply
(closed forms of Rescaling and Normalization), eps against the range in the header and the JSON, and the
flags `eps_large`, `data_out_of_range_for_model` and `near_chance` at their thresholds; end to end on a
Rescaling(1/255) model whose worst case is known by hand."""

import json

import keras
import numpy as np
import pytest

import gradkit
from gradkit import evaluation
from gradkit.evaluation import _flags, _scale

OPTIONS = dict(batch_size=16, seed=0, steps=2, n_queries=10, verbose=0)


def quadrants(a=20.0, first=None):
    """Input(6) -> `first` (default Rescaling(1/255)) -> Dense(4): class (u0 > .5) + 2 (u1 > .5) of the
    rescaled input u, exactly (logit k - logit j is a linear function of u0 - .5 and u1 - .5)."""
    kernel = np.zeros((6, 4), "float32")
    kernel[0], kernel[1] = [-a, a, -a, a], [-a, -a, a, a]
    layers = [keras.Input((6,)), first or keras.layers.Rescaling(1 / 255), keras.layers.Dense(4)]
    model = keras.Sequential(layers)
    model.layers[-1].set_weights([kernel, -0.5 * kernel.sum(axis=0)])
    return model


def unit_data(n=32, seed=0):
    x = np.random.default_rng(seed).uniform(0, 1, (n, 6)).astype("float32")
    return x, ((x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5))


def hand_robust(u, eps):
    """The Linf worst case of `quadrants` at eps in rescaled units u: robust iff both margins exceed eps."""
    return float(np.mean(np.minimum(np.abs(u[:, 0] - 0.5), np.abs(u[:, 1] - 0.5)) > eps))


@pytest.mark.parametrize(
    "first, expected",
    [
        (keras.layers.Rescaling(1 / 255), (0.0, 255.0)),  # [0, 255] -> [0, 1] (Keras' docs)
        (keras.layers.Rescaling(1 / 127.5, offset=-1.0), (0.0, 255.0)),  # [0, 255] -> [-1, 1]
        (keras.layers.Rescaling(2.0, offset=-1.0), (0.0, 1.0)),  # [0, 1] -> [-1, 1]
        (keras.layers.Normalization(mean=0.5, variance=0.04), (0.1, 0.9)),  # mean +- 2 std
        (keras.Sequential([keras.layers.Rescaling(1 / 255), keras.layers.Normalization(mean=0.5,
                                                                                      variance=0.04)]),
         (0.1 * 255, 0.9 * 255)),  # nested, chained: the preimage through both
        (keras.layers.Dense(6), None),
    ],
)  # fmt: skip
def test_the_range_the_first_layers_imply(first, expected):
    implied, layers = _scale.model_range(quadrants(first=first), (6,))
    if expected is None:
        assert implied is None and layers is None
    else:
        np.testing.assert_allclose(implied, expected, rtol=1e-5, atol=1e-5)
        assert layers.startswith(("Rescaling(scale=", "Normalization(mean"))


def test_eps_against_the_range_in_every_norm():
    found = _scale.Inputs(classes=4, features=6, data_range=(0.0, 1.0))
    cases = {np.inf: 1.0, 2.0: np.sqrt(6), 1.0: 6.0}  # the diameter of [0, 1]^6 in each norm
    for norm, diameter in cases.items():
        config = _plan_config(eps=0.1, norm=norm, clip_values=(0.0, 255.0), inputs=found)
        scale = _scale.scale(config)
        assert scale["range"] == [0.0, 255.0] and scale["range_of"] == "clip_values"
        assert scale["eps_of_range"] == pytest.approx(0.1 / 255)
        assert scale["diameter"] == pytest.approx(255 * diameter)
        assert scale["eps_of_diameter"] == pytest.approx(0.1 / (255 * diameter))
    scale = _scale.scale(_plan_config(eps=8 / 255, norm=np.inf, clip_values=(0.0, 1.0), inputs=found))
    assert _scale.text(scale, 8 / 255, np.inf) == "eps=0.0313725 (Linf; 3.14% of the range [0, 1])"
    scale = _scale.scale(_plan_config(eps=0.5, norm=np.inf, clip_values=None, inputs=found))
    assert scale["range_of"] == "data" and "of the data's range (no clip_values) [0, 1]" in _scale.text(
        scale, 0.5, np.inf
    )


def _plan_config(**changes):
    from gradkit.evaluation import _plan

    base = dict(batch_size=None, seed=0, n_queries=1, steps=1, verbose=0, entries=())
    return _plan.Config(**{**base, **changes})


def _scale_of(eps, norm=np.inf, clip=(0.0, 1.0)):
    found = _scale.Inputs(classes=4, features=6, data_range=(0.0, 1.0))
    return _scale.scale(_plan_config(eps=eps, norm=norm, clip_values=clip, inputs=found))


def test_eps_large_over_a_quarter_of_the_diameter_or_robust_equal_clean_at_a_tiny_eps():
    assert _scale.eps_flag(_scale_of(0.25), np.inf, 1.0, 0.5) is None
    large = _scale.eps_flag(_scale_of(0.26), np.inf, 1.0, 0.5)
    assert large["name"] == "eps_large" and "26% of the range [0, 1]" in large["message"]
    assert "(eps=0.03137, CLI: --eps 8/255" in _scale.eps_flag(_scale_of(8.0), np.inf, 1, 0)["message"]
    assert _scale.eps_flag(_scale_of(0.25 * 6 - 0.01, 1.0), 1.0, 1.0, 0.5) is None  # L1: the diameter 6
    assert _scale.eps_flag(_scale_of(0.25 * 6 + 0.01, 1.0), 1.0, 1.0, 0.5)["name"] == "eps_large"
    small = _scale_of(8 / 255, clip=(0.0, 255.0))  # 8/255 on data in [0, 255]: 1/32 of a level
    assert _scale.eps_flag(small, np.inf, 0.9, 0.8) is None  # points broke: the eps moved something
    flagged = _scale.eps_flag(small, np.inf, 0.9, 0.9)
    assert "pass eps=8 (CLI: --eps 8)" in flagged["message"] and "0.0123% of the range" in flagged["message"]
    assert _scale.eps_flag(_scale_of(0.0, clip=(0.0, 255.0)), np.inf, 0.9, 0.9) is None  # eps 0: no attack
    assert _scale.eps_flag(_scale_of(1 / 255, clip=(0.0, 1.0)), np.inf, 0.9, 0.9) is None  # one level
    assert _scale.eps_flag(_scale_of(0.4 / 255, clip=(0.0, 1.0)), np.inf, 0.9, 0.9)["name"] == "eps_large"


def test_data_out_of_range_for_the_model_or_for_clip_values():
    rescaled = _scale.Inputs(4, 6, (0.0, 1.0), (0.0, 255.0), "Rescaling(scale=0.003922, offset=0)")
    message = _scale.range_flag(rescaled, (0.0, 255.0))["message"]  # issue 44's first row
    assert "expect inputs in about [0, 255], but the data span [0, 1]" in message
    assert "fill 0.392% of clip_values [0, 255]" in message and "Multiply the data by 255" in message
    message = _scale.range_flag(rescaled, (0.0, 1.0))["message"]
    assert "but clip_values are [0, 1] and the data span [0, 1]" in message
    assert "pass clip_values=(0, 255) (CLI: --clip-values=0,255)" in message
    pixels = _scale.Inputs(4, 6, (0.0, 255.0), (0.0, 255.0), "Rescaling(scale=0.003922, offset=0)")
    assert _scale.range_flag(pixels, (0.0, 255.0)) is None  # the model's units
    plain = _scale.Inputs(4, 6, (0.0, 1.0))
    assert _scale.range_flag(plain, (0.0, 1.0)) is None and _scale.range_flag(plain, None) is None
    assert _scale.range_flag(_scale.Inputs(4, 6, (0.0, 0.11)), (0.0, 1.0)) is None  # 11% of the range
    wide = _scale.range_flag(plain, (0.0, 255.0))
    assert wide["name"] == "data_out_of_range_for_model" and "--clip-values=0,1" in wide["message"]


def test_near_chance_is_one_definition_for_evaluate_and_the_study():
    assert _flags.near_chance(0.4375, 4) is None  # chance 0.25 plus a quarter of the way to 1
    flagged = _flags.near_chance(0.43, 4, hint="more --epochs")
    assert flagged["name"] == "near_chance" and flagged["message"].startswith("clean accuracy 0.430")
    assert evaluation.near_chance is _flags.near_chance
    assert _flags.near_chance(0.62, 2) is not None and _flags.near_chance(0.625, 2) is None


def test_issue_44_rows_1_and_2_in_python_match_the_hand_worst_case():
    x, y = unit_data()
    model = quadrants()
    # row 2: uint8 data, clip_values (0, 255), eps 8/255: no point moves; flagged with the right eps
    pixels = np.round(x * 255)
    wrong = gradkit.evaluate(model, pixels, y, eps=8 / 255, clip_values=(0, 255), **OPTIONS)
    assert wrong.robust_accuracy == wrong.clean_accuracy == 1.0
    assert [f["name"] for f in wrong.flags] == ["eps_large"] and "--eps 8)" in wrong.flags[0]["message"]
    assert wrong.summary().splitlines()[0].endswith("eps=0.0313725 (Linf; 0.0123% of the range [0, 255]), "
                                                    "version standard")  # fmt: skip
    right = gradkit.evaluate(model, pixels, y, eps=8, clip_values=(0, 255), **OPTIONS)
    assert right.robust_accuracy == hand_robust(pixels / 255, 8 / 255) < 1.0 and right.flags == []
    assert right.scale["eps_of_range"] == pytest.approx(8 / 255) and right.scale["model_range"][0] == 0
    # row 1: data in [0, 1] with clip_values (0, 255): the model sees u < 1/255, every point class 0
    row1 = gradkit.evaluate(model, x, y, eps=8, clip_values=(0, 255), **OPTIONS)
    assert row1.clean_accuracy == float(np.mean(y == 0)) < 0.4375
    assert [f["name"] for f in row1.flags][:2] == ["near_chance", "data_out_of_range_for_model"]
    shard = evaluation.evaluate_shard(model, x, y, epsilons=[8.0], clip_values=(0, 255), **OPTIONS)
    assert [f["name"] for f in shard.evaluations()[0].flags] == [f["name"] for f in row1.flags]


def test_the_scale_survives_shard_json_and_merge(tmp_path):
    x, y = unit_data()
    model = quadrants()
    parts = []
    for k in range(2):
        rows = evaluation.shard_rows(len(x), k, 2, OPTIONS["batch_size"])
        part = evaluation.evaluate_shard(
            model, x, y, epsilons=[8.0], rows=rows, clip_values=(0, 255), **OPTIONS
        )
        evaluation.write_report(part, tmp_path / f"p{k}")
        parts.append(evaluation.read_shard(tmp_path / f"p{k}"))
    report = evaluation.write_report(evaluation.merge_shards(parts), tmp_path / "all")
    on_disk = json.loads((tmp_path / "all" / "evaluation.json").read_text())
    assert on_disk["scale"] == report["scale"] == report["results"][0]["scale"]
    assert on_disk["scale"]["data_range"] == [float(x.min()), float(x.max())]
    assert on_disk["scale"]["eps_of_range"] == pytest.approx(8 / 255)
    assert {f["name"] for f in on_disk["flags"]} >= {"near_chance", "data_out_of_range_for_model"}
