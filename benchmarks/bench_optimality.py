"""AttackBench's optimality score (`gradkit.optimality`) of gradkit's and adv-lib's minimum-norm attacks
at an equal budget, L2, on the study's CNN trained on the study's digits split (issue 46, part 4).

Each library runs FMN, DDN, FAB and APGD-CE made minimum-norm by a per-sample eps-bisection on the same
`N` test points; the score of each of the eight attacks is taken against the per-sample best of all
eight (AttackBench's protocol: the best attack is the lower envelope over every attack and library).
The budget is AttackBench's 2,000 forward + backward passes per sample, a gradient counting as one
forward and one backward: FMN and DDN 1,000 steps; APGD 10 bisection steps of 100 iterations (fewer
where a point falls early); FAB `FAB_STEPS` steps, each library's own count of a step (gradkit's FAB
counts 1 forward and about C = 10 gradient rows a step, 96 steps about 1,990 passes; adv-lib's
docstring counts 2 forwards and C - 1 backwards a step, 180 steps 1,980). gradkit's own counts per
sample (forwards, gradients, passes = forwards + 2 x gradients, averaged over the points) are written
beside its scores.

Distances are measured alike for both libraries (`_distances`): the L2 norm of the returned example
where it fools the model (argmax), 0 for a point misclassified clean, inf elsewhere.

Run on the torch backend (adv-lib takes a torch.nn.Module, which a Keras model is there):
`KERAS_BACKEND=torch python benchmarks/bench_optimality.py` or via `benchmarks/run.py
bench_optimality`; on another backend it returns nothing.
"""

import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402
from gradkit import study  # noqa: E402
from gradkit.attacks import recording  # noqa: E402

N, EPOCHS = 64, 10
STEPS = 1000  # FMN, DDN: one gradient a step, 2,000 passes
FAB_STEPS = {"gradkit": 96, "adv-lib": 180}  # a step: gradkit 1 forward + C gradients; adv-lib 2 + (C - 1)
BISECTION, APGD_STEPS, HIGH = 10, 100, 4.0  # APGD: eps in [0, HIGH] halved 10 times, 100 iterations each


def _data():
    """The study's CNN trained on the study's digits split (10 epochs, batch 32), its first N test points."""
    keras.utils.set_random_seed(0)
    data = study.load_digits()
    model = study.build_model("cnn", data.x_train.shape[1:], data.n_classes)
    model.fit(data.x_train, data.y_train, epochs=EPOCHS, batch_size=32, verbose=0)
    return model, data.x_test[:N], data.y_test[:N].astype(np.int64)


def _predict(model, x):
    return np.argmax(np.asarray(model.predict(x, verbose=0, batch_size=256)), axis=1)


def _distances(model, x, y, adv, clean):
    """L2 norm of `adv - x` where `adv` fools the model, 0 where `x` is misclassified, else inf."""
    size = np.linalg.norm((np.asarray(adv, np.float64) - x).reshape(len(x), -1), axis=1)
    fooled = _predict(model, adv) != y
    return np.where(~clean, 0.0, np.where(fooled, size, np.inf))


def _adv_lib():
    """adv-lib 0.2.8's attacks, with stand-ins for its import-time `visdom` and `torchvision` (as
    tests/conftest.py's `import_adv_lib`)."""
    for name in ("visdom", "torchvision", "torchvision.models"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    sys.modules["visdom"].__dict__.setdefault("Visdom", object)
    sys.modules["torchvision"].__dict__.setdefault("models", sys.modules["torchvision.models"])
    import adv_lib.attacks

    return adv_lib.attacks


def _bisect(attack, x, y, clean):
    """Per-sample distances of a budget attack by bisection of eps in [0, HIGH]: `attack(rows, eps)`
    with eps `(m,)` returns `(adv, success)` on those rows; each point keeps the smallest norm of the
    examples that fooled it (inf if none)."""
    lo, hi = np.zeros(len(x)), np.full(len(x), HIGH)
    best = np.where(clean, np.inf, 0.0)
    for _ in range(BISECTION):
        mid = (lo + hi) / 2
        rows = np.flatnonzero(clean)
        adv, success = attack(rows, mid[rows])
        size = np.linalg.norm((np.asarray(adv, np.float64) - x[rows]).reshape(len(rows), -1), axis=1)
        best[rows[success]] = np.minimum(best[rows[success]], size[success])
        hi[rows[success]], lo[rows[~success]] = mid[rows[success]], mid[rows[~success]]
    return best


def _gradkit(model, x, y, clean):
    """gradkit's four attacks: distances and counts per sample."""
    out, counts = {}, {}

    def counted(name, fn):
        with recording() as record:
            adv = fn()
        counts[name] = [record.n_forwards, record.n_gradients]
        return adv, record

    for name in ("fmn", "ddn"):
        fn = getattr(gradkit, name)
        adv, _ = counted(name, lambda fn=fn: fn(model, x, y, norm=2, steps=STEPS, clip_values=(0, 1)))
        out[name] = _distances(model, x, y, adv, clean)
    adv, _ = counted(
        "fab", lambda: gradkit.fab(model, x, y, norm=2, steps=FAB_STEPS["gradkit"], clip_values=(0, 1))
    )
    out["fab"] = _distances(model, x, y, adv, clean)
    counts["apgd"] = [0, 0]

    def apgd(rows, eps):  # gradkit's APGD takes one eps: one call per distinct eps of the bisection
        adv, success = x[rows].copy(), np.zeros(len(rows), bool)
        for value in np.unique(eps):
            group = np.flatnonzero(eps == value)
            with recording() as record:
                adv[group] = gradkit.apgd(model, x[rows[group]], y[rows[group]], eps=float(value), norm=2,
                                          steps=APGD_STEPS, clip_values=(0, 1), seed=0)  # fmt: skip
            success[group] = record.success
            counts["apgd"][0] += record.n_forwards
            counts["apgd"][1] += record.n_gradients
        return adv, success

    out["apgd"] = _bisect(apgd, x, y, clean)
    return out, counts


def _peer(model, x, y, clean):
    """adv-lib's four attacks at the same budget: distances per sample."""
    import torch

    attacks, model = _adv_lib(), model.eval()
    xt, yt = torch.tensor(x), torch.tensor(y)

    def run(fn, rows=None, **kwargs):
        rows = np.arange(len(x)) if rows is None else rows
        with torch.enable_grad():
            adv = fn(model, xt[rows], yt[rows], **kwargs)
        return adv.detach().numpy()

    out = {
        "fmn": _distances(model, x, y, run(attacks.fmn, norm=2, steps=STEPS), clean),
        "ddn": _distances(model, x, y, run(attacks.ddn, steps=STEPS, levels=None), clean),
        "fab": _distances(model, x, y, run(attacks.fab, norm=2, n_iter=FAB_STEPS["adv-lib"]), clean),
    }

    def apgd(rows, eps):  # adv-lib's APGD takes a per-sample eps
        adv = run(attacks.apgd, rows, eps=torch.tensor(eps, dtype=torch.float32), norm=2,
                  n_iter=APGD_STEPS, loss_function="ce")  # fmt: skip
        return adv, _predict(model, adv) != y[rows]

    out["apgd"] = _bisect(apgd, x, y, clean)
    return out


def run():
    if keras.backend.backend() != "torch":
        return {}
    model, x, y = _data()
    clean = _predict(model, x) == y
    ours, counts = _gradkit(model, x, y, clean)
    theirs = _peer(model, x, y, clean)
    distances = {f"gradkit {k}": v for k, v in ours.items()} | {f"adv-lib {k}": v for k, v in theirs.items()}
    scores = gradkit.optimality(distances, clean=clean)
    per_sample = {
        k: [round(f / N, 1), round(g / N, 1), round((f + 2 * g) / N, 1)] for k, (f, g) in counts.items()
    }
    return {
        "optimality": {
            "model": f"gradkit.study CNN (digits, {EPOCHS} epochs), {N} test points, L2, torch backend",
            "budget": "2,000 forward + backward passes per sample (FMN, DDN 1,000 steps; FAB "
            f"{FAB_STEPS['gradkit']} (gradkit), {FAB_STEPS['adv-lib']} (adv-lib) steps; APGD-CE "
            f"{BISECTION} bisection steps of {APGD_STEPS} in [0, {HIGH}])",
            "clean_accuracy": round(float(clean.mean()), 4),
            "gradkit": {k: round(scores[f"gradkit {k}"], 4) for k in ours},
            "adv_lib": {k: round(scores[f"adv-lib {k}"], 4) for k in theirs},
            "gradkit_minus_adv_lib": {
                k: round(scores[f"gradkit {k}"] - scores[f"adv-lib {k}"], 4) for k in ours
            },
            "gradkit_per_sample_forwards_gradients_passes": per_sample,
            "median_l2": {k: round(float(np.median(v[clean])), 4) for k, v in distances.items()},
            "success_rate": {k: round(float(np.isfinite(v[clean]).mean()), 4) for k, v in distances.items()},
        }
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
