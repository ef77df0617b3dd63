"""The whole robustness curve from one minimum-norm run: FMN (Linf, 100 steps) once vs APGD-CE (100
steps, one restart) at each of 8 eps, on a small CNN trained on scikit-learn digits (8x8x1 in [0, 1]).

- `fmn_curve_s`: `gradkit.robustness_curve(..., attack="fmn")` over the 8 eps (one FMN run);
- `apgd_8_eps_s`: eight `gradkit.apgd` runs, one per eps (each attacks only the points still robust);
- `fmn_over_apgd`: the ratio (goal <= 0.25);
- `fmn_accuracy`, `apgd_accuracy`: the two curves, so the speed is not bought with a weaker attack.

Run standalone (`python benchmarks/bench_min_norm.py`) or via `benchmarks/run.py bench_min_norm`.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import gradkit  # noqa: E402

from common import alternating  # noqa: E402

STEPS, ROWS = 100, 400
EPSILONS = [0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.16, 0.2]


def _data():
    keras.utils.set_random_seed(0)
    d = load_digits()
    x, y = (d.images / 16.0).astype("float32")[..., None], d.target
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10)])  # fmt: skip
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:1300], y[:1300], epochs=6, batch_size=64, verbose=0)
    return model, x[1300 : 1300 + ROWS], y[1300 : 1300 + ROWS]


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
    times = alternating({"fmn": fmn, "apgd": apgd}, repeats=3)
    return {
        "min_norm": {
            "fmn_curve_s": round(times["fmn"], 3),
            "apgd_8_eps_s": round(times["apgd"], 3),
            "fmn_over_apgd": round(times["fmn"] / times["apgd"], 3),
            "fmn_accuracy": [round(a, 4) for a in out["fmn"]],
            "apgd_accuracy": [round(a, 4) for a in out["apgd"]],
            "load_average": round(os.getloadavg()[0], 1),
        }
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
