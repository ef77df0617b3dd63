"""Attacks that know the vote, on the demo's boosted models (issue 17): evaluate per objective against the
independent worst case of attacks on the soft ensemble.

Needs a finished `make demo` (`runs/demo`, or the folder given as the first argument). For each model it
records, at eps 0.1 on the 450 digits test points:

- `evaluate_<objective>`: robust accuracy of APGD-CE + APGD-T (100 steps) with that objective alone;
- `evaluate_standard`: `gradkit.evaluate` as the study runs it (loss_sum and vote_margin, Square 5,000);
- `independent_soft`: the per-sample worst case of APGD-CE, APGD-DLR (100 steps each) and Square (1,000
  queries) on the soft ensemble (objective "prob_mean": the weighted mean of the members' probabilities),
  and PGD-10 (loss_sum); every success judged on the real decision (the weighted hard vote).

Run: `python benchmarks/bench_ensembles.py [runs/demo]` (TensorFlow is the fastest here; about 5 minutes).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402
from gradkit.attacks import decide, run_attack  # noqa: E402
from gradkit.study import load_digits  # noqa: E402

from common import merge  # noqa: E402

EPS, CLIP = 0.1, (0, 1)


def _independent(model, x, y):
    robust = decide(model, x) == y
    for name, options in (("apgd-ce", {}), ("apgd-dlr", {}), ("square", {"n_queries": 1000})):
        result = run_attack(
            name, model, x, y, eps=EPS, clip_values=CLIP, seed=0, objective="prob_mean", **options
        )
        robust &= ~result.success
    pgd = gradkit.pgd(model, x, y, eps=EPS, eps_step=0.025, steps=10, clip_values=CLIP, seed=0)
    return float(np.mean(robust & (decide(model, pgd) == y)))


def _model_figures(model, x, y):
    out = {"clean": float(np.mean(decide(model, x) == y)), "independent_soft": _independent(model, x, y)}
    for objective in ("loss_sum", "logit_mean", "prob_mean", "vote_margin"):
        attacks = [f"apgd-ce/{objective}", f"apgd-t/{objective}"]
        result = gradkit.evaluate(model, x, y, eps=EPS, attacks=attacks, clip_values=CLIP, verbose=0)
        out[f"evaluate_{objective}"] = result.robust_accuracy
    out["evaluate_standard"] = gradkit.evaluate(
        model, x, y, eps=EPS, clip_values=CLIP, verbose=0
    ).robust_accuracy
    return out


def run(folder="runs/demo"):
    data = load_digits()
    x, y = data.x_test, data.y_test
    figures = {"eps": EPS, "n": len(y), "folder": folder}
    for name in ("adaboost_m1", "adv_boost"):
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            figures[name] = _model_figures(gradkit.load(path), x, y)
    single = os.path.join(folder, "single.keras")
    if os.path.isfile(single):
        figures["single"] = _model_figures(keras.saving.load_model(single), x, y)
    return {"ensembles": figures}


if __name__ == "__main__":
    merge(run(*sys.argv[1:]))
