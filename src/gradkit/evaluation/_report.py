"""The files of an evaluation: `evaluation.json` and `samples.csv` (`write_report`), each written
atomically. `report` and `sample_rows` build the content; other code can extend their dict and rows
before writing.
"""

import csv
import os

from gradkit import _io
from gradkit.evaluation._merge import shard_from_dict, shard_to_dict

_DIGESTS = ("model", "x", "y")


def report(shard, evaluations, info=None):
    """The content of evaluation.json for a `Shard` and its `evaluations()` (see `write_report`)."""
    settings = {k: v for k, v in shard.settings.items() if k not in _DIGESTS}
    results, flags = [], {}
    for ev in evaluations:
        record = {k: v for k, v in ev.to_dict().items() if k not in ("robust", "broken_by")}
        results.append(record)
        for flag in record["flags"]:
            flags.setdefault(flag["name"], {**flag, "eps": ev.eps})
    last = evaluations[-1]
    return {
        "clean_accuracy": last.clean_accuracy,
        "robust_accuracy": last.robust_accuracy,
        **({} if last.certified is None else {"certified_accuracy": last.certified_accuracy}),
        "eps": last.eps,
        "epsilons": [ev.eps for ev in evaluations],
        "n_points": shard.stop - shard.start,
        "skipped": last.to_dict()["skipped"],
        "scale": last.scale,
        "results": results,
        "flags": list(flags.values()),
        "settings": settings,
        "model": {"sha256": shard.settings["model"]},
        "data": {"x": shard.settings["x"], "y": shard.settings["y"], "n_points": shard.settings["n_total"]},
        "rows": [shard.start, shard.stop],
        **(info or {}),
    }


def sample_rows(shard, evaluations):
    """samples.csv's rows (dicts), one per point of `shard`, indices counted in the whole data."""
    several = len(evaluations) > 1
    first = {}  # point -> the smallest eps that broke it
    for ev in evaluations:
        for i, robust in enumerate(ev.robust):
            if not robust and i not in first:
                first[i] = 0.0 if ev.broken_by[i] == "clean" else ev.eps
    last, rows = evaluations[-1], []
    for i, (label, pred) in enumerate(zip(shard.labels, shard.prediction)):
        row = {
            "index": shard.start + i,
            "label": int(label),
            "clean_prediction": int(pred),
            "robust": int(bool(last.robust[i])),
            "broken_by": last.broken_by[i] or "",
        }
        if last.certified is not None:
            row["certified"] = int(bool(last.certified[i]))
        if several:
            row["broken_at_eps"] = first.get(i, "")
            if last.certified is not None:
                row["certified_up_to_eps"] = _largest_certified(evaluations, i)
        rows.append(row)
    return rows


def _largest_certified(evaluations, i):
    """The largest eps at which point `i` was certified, or "" where it was at none."""
    return next((ev.eps for ev in reversed(evaluations) if ev.certified is not None and ev.certified[i]), "")


def _write_csv(rows, path):
    def write(f):
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    _io.write_text(path, write)


def write_report(shard, out, *, info=None):
    """Writes samples.csv, shard.json (a part of the points only), then evaluation.json to `out`.

        evaluation.json   top-level "clean_accuracy" and "robust_accuracy" (at the largest eps), "eps",
                          "epsilons", "skipped" (`[attack, reason]` of the version's attacks that did
                          not run), "scale" (the largest eps against the input range, as
                          `Evaluation.scale`), "results" (one per eps: accuracies, per-attack records,
                          costs, flags, skipped, scale), "flags" (each flag once, with its message and
                          reference), "settings", "model" and "data" (SHA-256 digests), "rows", and what
                          the caller adds (`info`: versions, sources)
        samples.csv       per point: index, label, clean_prediction, robust (0/1, at the largest eps),
                          broken_by ("clean", the attack, or empty); with several eps also
                          broken_at_eps (the smallest eps that broke it; 0 for "clean", empty if none
                          did); with `certify`, certified (0/1 at the largest eps) and with several
                          eps certified_up_to_eps (the largest eps it was certified at, empty if
                          none); evaluation.json then has "certified_accuracy" at the top level and
                          "certified", "certified_accuracy", "certified_interval" per result
        shard.json        only for a part of the points (`--shard`): the `Shard` that `gradkit merge`
                          reads

    Args:
        shard: a `Shard` (`evaluate_shard`, `merge_shards`).
        out: the folder (created if missing).
        info: None or a dict added at the top level of evaluation.json (versions, sources).

    Returns:
        The evaluation.json dict.
    """
    evaluations = shard.evaluations()
    os.makedirs(out, exist_ok=True)
    _write_csv(sample_rows(shard, evaluations), os.path.join(out, "samples.csv"))
    if (shard.start, shard.stop) != (0, shard.settings["n_total"]):
        _io.write_json(shard_to_dict(shard), os.path.join(out, "shard.json"))
    content = report(shard, evaluations, info)
    _io.write_json(content, os.path.join(out, "evaluation.json"))
    return content


def read_shard(out):
    """The `Shard` a `write_report` of part of the points left in the folder `out`.

    Raises:
        ValueError: `out` holds no shard.json (not a `--shard` output, or unfinished), or an unreadable one.
    """
    path = os.path.join(out, "shard.json")
    try:
        record = _io.read_json(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path!r} is unreadable ({err})") from None
    if record is None:
        raise ValueError(
            f"{out!r} holds no shard.json: not the output of a finished `gradkit evaluate --shard K/N`"
        )
    try:
        return shard_from_dict(record)
    except ValueError as err:
        raise ValueError(f"{path!r}: {err}") from None
