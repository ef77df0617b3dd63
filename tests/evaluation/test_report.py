"""`write_report`'s evaluation.json and the table: what ran is what is reported. The attacks a version
skips (a 2-class model: APGD-T and FAB-T) are named with their reasons in `Evaluation.skipped`, in the
table's header and rows, and in evaluation.json (top level and per result), also after shard.json and
`merge_shards`."""

import json

import numpy as np

import gradkit
from gradkit import evaluation
from helpers.binary import diagonal_data
from helpers.models import linear

OPTIONS = dict(clip_values=(0.0, 1.0), batch_size=8, seed=0, steps=2, n_queries=10, verbose=0)
SKIPPED = [
    ["apgd-t", "needs at least 4 classes; the model has 2"],
    ["fab-t", "needs at least 3 classes; the model has 2"],
]


def two_classes():
    """Dense(2) logits on the diagonal data: class 1 iff x0 > x1 (every point right), and 24 points."""
    x, y = diagonal_data()
    return linear(np.array([[-3, 3], [3, -3]], "float32"), np.zeros(2, "float32")), x[:24], y[:24]


def test_a_version_s_skipped_attacks_are_in_the_result_the_table_and_the_json(tmp_path):
    model, x, y = two_classes()
    ev = gradkit.evaluate(model, x, y, eps=0.05, **OPTIONS)
    assert ev.attacks == ["apgd-ce", "square"] and ev.skipped == SKIPPED
    table = ev.summary().splitlines()
    assert table[0].endswith("version standard (apgd-t, fab-t skipped)")
    assert f"{'apgd-t':<28}skipped: {SKIPPED[0][1]}" in table
    assert f"{'fab-t':<28}skipped: {SKIPPED[1][1]}" in table
    assert ev.to_dict()["skipped"] == SKIPPED
    shard = evaluation.evaluate_shard(model, x, y, epsilons=[0.02, 0.05], **OPTIONS)
    assert [e.skipped for e in shard.evaluations()] == [SKIPPED, SKIPPED]
    report = evaluation.write_report(shard, tmp_path / "one")
    on_disk = json.loads((tmp_path / "one" / "evaluation.json").read_text())
    assert report["skipped"] == on_disk["skipped"] == SKIPPED
    assert [r["skipped"] for r in on_disk["results"]] == [SKIPPED, SKIPPED]
    assert shard.evaluations()[1].summary().splitlines()[0] == table[0]


def test_skipped_attacks_survive_shard_json_and_merge(tmp_path):
    model, x, y = two_classes()
    for k in range(2):
        rows = evaluation.shard_rows(len(x), k, 2, OPTIONS["batch_size"])
        part = evaluation.evaluate_shard(model, x, y, epsilons=[0.05], rows=rows, **OPTIONS)
        evaluation.write_report(part, tmp_path / f"part{k}")
    parts = [evaluation.read_shard(tmp_path / f"part{k}") for k in range(2)]
    assert [p.evaluations()[0].skipped for p in parts] == [SKIPPED, SKIPPED]
    merged = evaluation.merge_shards(parts)
    report = evaluation.write_report(merged, tmp_path / "all")
    assert report["skipped"] == report["results"][0]["skipped"] == SKIPPED
    one = gradkit.evaluate(model, x, y, eps=0.05, **OPTIONS)
    assert merged.evaluations()[0].robust.tolist() == one.robust.tolist()
    assert merged.evaluations()[0].summary().splitlines()[0] == one.summary().splitlines()[0]


def test_a_custom_list_skips_nothing():
    model, x, y = two_classes()
    ev = gradkit.evaluate(model, x, y, eps=0.05, attacks=["fgsm"], **OPTIONS)
    assert ev.skipped == [] and "skipped" not in ev.summary()
    shard = evaluation.evaluate_shard(model, x, y, epsilons=[0.05], attacks=["fgsm"], **OPTIONS)
    assert shard.evaluations()[0].skipped == [] and shard.settings["skipped"] == []
