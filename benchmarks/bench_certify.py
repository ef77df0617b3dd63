"""The cost of certified bounds against one compiled forward pass, on the study's digits CNN.

The study's CNN (`gradkit.study.build_model("cnn", (8, 8, 1), 10)`: Conv2D(16) - MaxPool - Conv2D(32) -
MaxPool - Flatten - Dense(64) - Dense(10, softmax)), trained 3 epochs on the study's digits split, and its
450 test points at Linf eps 0.02 inside [0, 1]:

- `forward_s`: the model's compiled forward on the 450 points (`model.predict_on_batch`, warm);
- `ibp_s`, `crown_ibp_s`, `crown_s`: `gradkit.certify(..., method=...)` on the same points (warm);
- `ibp_over_forward`, `crown_ibp_over_forward`, `crown_over_forward`: the ratios (issue 45's goals:
  IBP <= 2, CROWN <= 20), medians of alternating rounds, with the spread (max / min over the rounds);
- `crown_peak_mib`: the largest coefficient array CROWN holds per block (rows x 2 d x d floats, d the
  widest value: it grows with the neurons per layer, not with the batch beyond one block);
- `ibp_certified`, `crown_ibp_certified`, `crown_certified`: the certified accuracies.

Run standalone (`python benchmarks/bench_certify.py`) or via `benchmarks/run.py bench_certify`.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402
from gradkit import study  # noqa: E402
from gradkit.certificates import _api, _graph  # noqa: E402

from common import alternating  # noqa: E402

EPS = 0.02


def run():
    keras.utils.set_random_seed(0)
    data = study.load_digits()
    model = study.build_model("cnn", data.x_train.shape[1:], data.n_classes)
    model.fit(data.x_train, data.y_train, epochs=3, batch_size=32, verbose=0)
    x, y = data.x_test, data.y_test
    fns = {
        "forward": lambda: model.predict_on_batch(x),
        "ibp": lambda: gradkit.certify(model, x, y, EPS, method="ibp", clip_values=(0, 1)),
        "crown-ibp": lambda: gradkit.certify(model, x, y, EPS, method="crown-ibp", clip_values=(0, 1)),
        "crown": lambda: gradkit.certify(model, x, y, EPS, method="crown", clip_values=(0, 1)),
    }
    for fn in fns.values():
        fn()  # compiled before timing
    seconds, spread = alternating(fns, repeats=3, spread=True)
    plan = _graph.plan(model)
    widest = max(int(np.prod(s)) for s in plan.shapes.values())
    rows = _api._rows_per_block(plan, "crown", 10, None)
    return {
        "certify": {
            "forward_s": seconds["forward"],
            "ibp_s": seconds["ibp"],
            "crown_s": seconds["crown"],
            "ibp_over_forward": seconds["ibp"] / seconds["forward"],
            "crown_ibp_s": seconds["crown-ibp"],
            "crown_ibp_over_forward": seconds["crown-ibp"] / seconds["forward"],
            "crown_over_forward": seconds["crown"] / seconds["forward"],
            "spread": spread,
            "crown_rows_per_block": rows,
            "crown_peak_mib": rows * 2 * widest * widest * 4 / 2**20,
            "ibp_certified": fns["ibp"]().certified_accuracy,
            "crown_ibp_certified": fns["crown-ibp"]().certified_accuracy,
            "crown_certified": fns["crown"]().certified_accuracy,
        }
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
