"""Attack speed on scikit-learn digits (1,797 images 8x8x1) with a small CNN, against ART and foolbox.

Measured side by side (round-robin, medians) in one run:

- `fgsm_ms`, `pgd10_ms`: gradkit FGSM and PGD-10 (Linf, eps 0.1, eps_step 0.025, no random start) on all
  1,797 images, in one batch.
- `art_over_gradkit`, `foolbox_over_gradkit`: peer time / gradkit time for PGD-10 (the FGSM ratios are in
  `art_fgsm_over_gradkit`, `foolbox_fgsm_over_gradkit`). ART 1.20 (TensorFlowV2Classifier, batch_size
  1,797) and foolbox 3.3 (TensorFlowModel) wrap TensorFlow models, so these keys exist on the
  TensorFlow backend only. Both peers also report their success rate (extra forward passes), as they
  always do; that is part of their cost.
- `ensemble_pgd_limit_ratio`: PGD-10 on a 5-CNN `WeightedEnsemble` / 10 calls of the ensemble's bare
  compiled input gradient (`InputGradient.compute`, one compiled forward+backward for all members), both
  on the first 600 images: the cost of the attack loop on top of the 10 gradients it cannot avoid (goal
  <= 1.2). `ensemble_pgd10_ms` is the attack's time.

Run standalone (`python benchmarks/bench_attacks.py`, prints the section) or via `benchmarks/run.py`
(merges it into results.json). One backend's run takes well under 2 minutes on 2 CPU cores.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import gradkit  # noqa: E402
from gradkit import attacks as _base  # noqa: E402

from common import alternating  # noqa: E402

EPS, EPS_STEP, STEPS = 0.1, 0.025, 10
ENSEMBLE_ROWS = 600  # the ensemble ratio is timed on the first 600 images: more rounds in the same time
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _cnn(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(loss=LOSS)
    return model


def _peers(model, x, y):
    """ART and foolbox FGSM / PGD-10 callables on the TensorFlow backend, else {}."""
    if keras.backend.backend() != "tensorflow":
        return {}
    import foolbox
    from art.attacks.evasion import FastGradientMethod, ProjectedGradientDescent
    from art.estimators.classification import TensorFlowV2Classifier

    clf = TensorFlowV2Classifier(
        model, nb_classes=10, input_shape=(8, 8, 1), loss_object=LOSS, clip_values=(0, 1)
    )
    art_fgsm = FastGradientMethod(clf, eps=EPS, batch_size=len(x))
    art_pgd = ProjectedGradientDescent(
        clf, eps=EPS, eps_step=EPS_STEP, max_iter=STEPS, num_random_init=0, batch_size=len(x), verbose=False
    )
    fmodel = foolbox.TensorFlowModel(model, bounds=(0, 1))
    fb_pgd = foolbox.attacks.LinfPGD(abs_stepsize=EPS_STEP, steps=STEPS, random_start=False)
    xt, yt = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    return {
        "art_fgsm": lambda: art_fgsm.generate(x, y),
        "art_pgd10": lambda: art_pgd.generate(x, y),
        "fb_fgsm": lambda: foolbox.attacks.FGSM()(fmodel, xt, yt, epsilons=EPS),
        "fb_pgd10": lambda: fb_pgd(fmodel, xt, yt, epsilons=EPS),
    }


def run(repeats=5):
    data = load_digits()
    x, y = (data.images / 16).astype(np.float32)[..., None], data.target
    model = _cnn(0)
    fns = {
        "fgsm": lambda: gradkit.fgsm(model, x, y, eps=EPS, clip_values=(0, 1)),
        "pgd10": lambda: gradkit.pgd(
            model, x, y, eps=EPS, eps_step=EPS_STEP, steps=STEPS, clip_values=(0, 1), random_start=False
        ),
        **_peers(model, x, y),
    }
    for fn in fns.values():  # compile / trace outside the timing
        fn()
    t = alternating(fns, repeats=repeats)
    out = {"fgsm_ms": 1e3 * t["fgsm"], "pgd10_ms": 1e3 * t["pgd10"]}
    if "art_pgd10" in t:
        out["art_over_gradkit"] = t["art_pgd10"] / t["pgd10"]
        out["foolbox_over_gradkit"] = t["fb_pgd10"] / t["pgd10"]
        out["art_fgsm_over_gradkit"] = t["art_fgsm"] / t["fgsm"]
        out["foolbox_fgsm_over_gradkit"] = t["fb_fgsm"] / t["fgsm"]

    ensemble = gradkit.WeightedEnsemble([_cnn(s) for s in range(1, 6)], [0.3, 0.25, 0.2, 0.15, 0.1])
    x, y = x[:ENSEMBLE_ROWS], y[:ENSEMBLE_ROWS]
    grad = _base.gradient_for(ensemble)  # the compiled function the attack itself uses
    xs, labels, weights, n = grad.check(x, y)

    def attack():
        gradkit.pgd(
            ensemble, x, y, eps=EPS, eps_step=EPS_STEP, steps=STEPS, clip_values=(0, 1), random_start=False
        )

    def limit():
        for _ in range(STEPS):
            grad.compute(xs, labels, weights, n)

    attack()
    limit()
    t = alternating({"attack": attack, "limit": limit}, repeats=repeats + 2)
    out["ensemble_pgd10_ms"] = 1e3 * t["attack"]
    out["ensemble_pgd_limit_ratio"] = t["attack"] / t["limit"]
    return {"attacks": {k: round(v, 3) for k, v in out.items()}}


if __name__ == "__main__":
    print(json.dumps({keras.backend.backend(): run()}, indent=2))
