"""The "malt" version of `gradkit.evaluate` against the standard one (issue 46, part 2), on the study's CNN.

The model and data are `bench_evaluation`'s: scikit-learn digits (450 test images 8x8x1), the study's
default CNN (two 3x3 convolutions of 16 and 32 filters, each followed by a 2x2 max-pool; logits), eps 0.1
(Linf), clip (0, 1), 100 steps, 5000 queries. Measured in one run:

- `standard` and `malt`: robust accuracy, wall seconds, per-attack seconds and points of
  `evaluate(version=...)`, and the CPU seconds of this process; `malt_minus_standard_points` (goal
  <= 0.5) and `malt_over_standard_time` (wall; goal <= 0.5), `malt_over_standard_cpu_time` (CPU: steadier
  on a loaded machine); `broken_by_standard_only` / `broken_by_malt_only`, the points one version broke and
  the other did not.
- `malt_attack_over_standard_time`: the MALT attack alone as the paper times it (APGD-CE and the
  MALT-targeted APGD-T of the "malt" run, without Square) over the standard version's time.
- `three_targets`: APGD-T with 3 targets, by logit and by MALT, on the points APGD-CE left robust
  (the ranking matters only when fewer targets than C - 1 are tried: with 9 of 10 classes the two
  rankings attack the same classes).

Run standalone (`python benchmarks/bench_malt.py`) or via `benchmarks/run.py bench_malt`.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from bench_evaluation import EPS, _model  # noqa: E402

import gradkit  # noqa: E402
from gradkit import attacks  # noqa: E402

OPTIONS = dict(eps=EPS, clip_values=(0, 1), verbose=0)


def _evaluate(model, x, y, version):
    start, cpu = time.perf_counter(), time.process_time()
    result = gradkit.evaluate(model, x, y, version=version, **OPTIONS)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    per_attack = {k: {"seconds": round(v["seconds"], 2), "points": v["n_points"], "broken": v["n_broken"]}
                  for k, v in result.per_attack.items()}  # fmt: skip
    summary = {"robust_accuracy": round(result.robust_accuracy, 4), "seconds": round(seconds, 2),
               "cpu_seconds": round(cpu, 2), "per_attack": per_attack}  # fmt: skip
    return result, summary


def _three_targets(model, x, y, standard):
    """APGD-T (DLR, 3 targets, 100 steps, 1 restart) by logit and by MALT on the points the standard
    run's APGD-CE left robust and correctly classified: points broken and seconds of each."""
    rows = np.flatnonzero([b != "apgd-ce" and b != "clean" for b in standard.broken_by])
    rows = rows[attacks.decide(model, x[rows]) == y[rows]]
    out = {"points": int(len(rows))}
    for selection in ("logits", "malt"):
        start = time.perf_counter()
        with attacks.recording() as record:
            gradkit.apgd(model, x[rows], y[rows], eps=EPS, loss="dlr", targeted=True, n_target_classes=3,
                         clip_values=(0, 1), seed=0, target_selection=selection)  # fmt: skip
        out[selection] = {
            "broken": int(record.success.sum()),
            "seconds": round(time.perf_counter() - start, 2),
        }
    return out


def run():
    model, x, y = _model(study_cnn=True)
    load = os.getloadavg()[0]
    gradkit.evaluate(model, x[:8], y[:8], version="malt", steps=2, n_queries=2, **OPTIONS)  # trace
    gradkit.evaluate(model, x[:8], y[:8], version="standard", steps=2, n_queries=2, **OPTIONS)
    standard, s = _evaluate(model, x, y, "standard")
    malt, m = _evaluate(model, x, y, "malt")
    attack = m["per_attack"]["apgd-ce"]["seconds"] + m["per_attack"]["apgd-t"]["seconds"]
    out = {
        "n": len(x),
        "eps": EPS,
        "standard": s,
        "malt": m,
        "malt_minus_standard_points": round(100 * (malt.robust_accuracy - standard.robust_accuracy), 2),
        "malt_over_standard_time": round(m["seconds"] / s["seconds"], 3),
        "malt_over_standard_cpu_time": round(m["cpu_seconds"] / s["cpu_seconds"], 3),
        "malt_attack_over_standard_time": round(attack / s["seconds"], 3),
        "broken_by_standard_only": int(np.sum(~standard.robust & malt.robust)),
        "broken_by_malt_only": int(np.sum(standard.robust & ~malt.robust)),
        "three_targets": _three_targets(model, x, y, standard),
        "load_average_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
    }
    return {"malt": out}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
