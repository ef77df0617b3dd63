"""The whole robustness curve from one minimum-norm run: FMN (Linf, 100 steps) once vs APGD-CE (100
steps, one restart) at each of 8 eps, on the study's CNN (`gradkit.study.build_model("cnn", ...)`)
trained on the study's digits split (`gradkit.study.load_digits()`: 1,347 train, 450 test 8x8x1 images
in [0, 1]), as `gradkit study --attacks fmn` runs it.

- `fmn_curve_s`: `gradkit.robustness_curve(..., attack="fmn")` over the 8 eps (one FMN run);
- `apgd_8_eps_s`: eight `gradkit.apgd` runs of the same steps, one per eps, on every test point;
- `fmn_over_apgd`: the ratio (issue 29's goal: <= 0.25), median of alternating rounds, with its
  `ratio_spread` (min and max of the per-round ratios) and the load average before and after;
- `fmn_accuracy`, `apgd_accuracy`: the two curves, so the speed is not bought with a weaker attack, and
  `fmn_minus_apgd_max_points`, the largest excess of FMN's accuracy over APGD-CE's (points; > 0: FMN
  weaker there).

Run standalone (`python benchmarks/bench_min_norm.py`) or via `benchmarks/run.py bench_min_norm`
(`make bench`).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402
from gradkit import study  # noqa: E402

STEPS, EPOCHS, REPEATS = 100, 10, 3
EPSILONS = [0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.16, 0.2]


def _data():
    """The study's CNN trained on the study's digits split (10 epochs, the study's batch size 32)."""
    keras.utils.set_random_seed(0)
    data = study.load_digits()
    model = study.build_model("cnn", data.x_train.shape[1:], data.n_classes)
    model.fit(data.x_train, data.y_train, epochs=EPOCHS, batch_size=32, verbose=0)
    return model, data.x_test, data.y_test


def _rounds(fns, repeats):
    """Times each callable of `fns` round-robin; per name the list of seconds, one per round."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            tic = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - tic)
    return times


def run():
    model, x, y = _data()
    out = {}

    def fmn():
        out["fmn"] = gradkit.robustness_curve(model, x, y, attack="fmn", epsilons=EPSILONS, steps=STEPS,
                                              clip_values=(0, 1))["accuracy"]  # fmt: skip

    def apgd():
        accuracy = []
        for eps in EPSILONS:
            adv = gradkit.apgd(model, x, y, eps=eps, steps=STEPS, clip_values=(0, 1), seed=0)
            accuracy.append(float(np.mean(model.predict(adv, verbose=0).argmax(1) == y)))
        out["apgd"] = accuracy

    fmn(), apgd()  # compile both outside the timing
    load_before = os.getloadavg()[0]
    times = _rounds({"fmn": fmn, "apgd": apgd}, REPEATS)
    ratios = [f / a for f, a in zip(times["fmn"], times["apgd"])]
    return {
        "min_norm": {
            "model": "gradkit.study CNN (digits, 10 epochs), 450 test points, Linf, 100 steps",
            "fmn_curve_s": round(float(np.median(times["fmn"])), 3),
            "apgd_8_eps_s": round(float(np.median(times["apgd"])), 3),
            "fmn_over_apgd": round(float(np.median(ratios)), 3),
            "ratio_spread": [round(min(ratios), 3), round(max(ratios), 3)],
            "goal": 0.25,
            "fmn_accuracy": [round(a, 4) for a in out["fmn"]],
            "apgd_accuracy": [round(a, 4) for a in out["apgd"]],
            "fmn_minus_apgd_max_points": round(100 * max(f - a for f, a in zip(out["fmn"], out["apgd"])), 2),
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        }
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
