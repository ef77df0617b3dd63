"""A `torch.nn.Module` wrapped by `gradkit.from_torch` against the same network written in Keras (PyTorch
backend only; on the others the section is not measured).

The network: an MNIST-sized CNN (1x28x28, channels first: Conv2d(16, 3x3) + ReLU + MaxPool2d(2),
Conv2d(32, 3x3) + ReLU + MaxPool2d(2), Linear(10); logits), trained for 3 epochs on scikit-learn's digits
scaled up to 28x28 (no download), and its Keras twin with the same weights (Conv2D channels_first).
Measured side by side in one run on `N` held-out points at eps 0.1 (Linf):

- `apgd100_*_s`: gradkit `apgd` (CE, 100 steps) on the wrapped module and on the Keras twin, and
  torchattacks 3.5.1 `APGD` (CE, 100 steps, 1 restart) on the bare module; medians of alternated runs;
  `wrapped_over_keras` and `wrapped_over_torchattacks` their ratios.
- `evaluate_*_s`: `gradkit.evaluate` (standard: APGD-CE, APGD-T, FAB-T, Square with `N_QUERIES`) on
  both, the faster of two alternated runs each, with the seconds per attack.
- `profile_wrapped_apgd`: where the wrapped module's APGD time goes (cProfile): the compiled step's
  traced forward and backward replays, the wrapper's per-call binding of the module's parameters
  (`backend.torch.modules.bound`), and the rest (the attack's Python and `keras.ops` updates).

Run standalone (`KERAS_BACKEND=torch python benchmarks/bench_torch_module.py`) or via `benchmarks/run.py`.
"""

import cProfile
import json
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402

from common import alternating  # noqa: E402

EPS, N, N_QUERIES = 0.1, int(os.environ.get("BENCH_TORCH_MODULE_N", "32")), 500


def _net():
    import torch

    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    )  # fmt: skip


def _trained():
    """`(net in eval mode, x (N, 1, 28, 28), y)`: digits scaled up 3x and padded to 28x28."""
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.kron(d.images / 16.0, np.ones((3, 3)))
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))).astype("float32")[:, None]
    x, y = images[:-N], d.target[:-N]
    torch.manual_seed(0)
    net = _net()
    optimizer = torch.optim.Adam(net.parameters(), 1e-3)
    for epoch in range(3):
        order = np.random.RandomState(epoch).permutation(len(x))
        for i in range(0, len(x), 64):
            rows = order[i : i + 64]
            optimizer.zero_grad()
            logits = net(torch.from_numpy(x[rows]))
            torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[rows])).backward()
            optimizer.step()
    return net.eval(), images[-N:], d.target[-N:]


def _keras_twin(net):
    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((1, 28, 28)),
            layers.Conv2D(16, 3, padding="same", activation="relu", data_format="channels_first"),
            layers.MaxPooling2D(2, data_format="channels_first"),
            layers.Conv2D(32, 3, padding="same", activation="relu", data_format="channels_first"),
            layers.MaxPooling2D(2, data_format="channels_first"),
            layers.Flatten(data_format="channels_last"),  # torch's (C, H, W) order
            layers.Dense(10),
        ]
    )
    weights = []
    for conv in (net[0], net[3]):
        weights += [conv.weight.permute(2, 3, 1, 0), conv.bias]
    weights += [net[7].weight.T, net[7].bias]
    model.set_weights([np.ascontiguousarray(w.detach().cpu().numpy()) for w in weights])
    return model


def _apgd(net, wrapped, twin, x, y):
    import torch
    import torchattacks

    attack = torchattacks.APGD(net, norm="Linf", eps=EPS, steps=100, n_restarts=1, loss="ce", seed=0)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype("int64"))
    options = dict(eps=EPS, steps=100, clip_values=(0, 1), seed=0)
    fns = {
        "wrapped": lambda: gradkit.apgd(wrapped, x, y, **options),
        "keras": lambda: gradkit.apgd(twin, x, y, **options),
        "torchattacks": lambda: attack(xt, yt),
    }
    for fn in fns.values():
        fn()  # traces
    times = alternating(fns, repeats=3)
    out = {f"apgd100_{k}_s": round(v, 3) for k, v in times.items()}
    out["wrapped_over_keras"] = round(times["wrapped"] / times["keras"], 3)
    out["wrapped_over_torchattacks"] = round(times["wrapped"] / times["torchattacks"], 3)
    return out, fns["wrapped"]


def _evaluate(wrapped, twin, x, y):
    runs = {"wrapped": [], "keras": []}
    for _ in range(2):
        for name, model in (("wrapped", wrapped), ("keras", twin)):
            start = time.perf_counter()
            result = gradkit.evaluate(
                model, x, y, eps=EPS, clip_values=(0, 1), n_queries=N_QUERIES, verbose=0
            )
            runs[name].append((time.perf_counter() - start, result))
    out = {}
    for name, pairs in runs.items():
        seconds, result = min(pairs, key=lambda p: p[0])
        out[f"evaluate_{name}_s"] = round(seconds, 2)
        out[f"evaluate_{name}_seconds_per_attack"] = {
            k: round(v["seconds"], 2) for k, v in result.per_attack.items()
        }
        out[f"evaluate_{name}_robust_accuracy"] = result.robust_accuracy
    out["evaluate_wrapped_over_keras"] = round(out["evaluate_wrapped_s"] / out["evaluate_keras_s"], 3)
    return out


def _profile(fn):
    """Shares of the wrapped APGD's time: traced replays + backward, the wrapper's binding, the rest."""
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    stats = pstats.Stats(profile).stats
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())

    def cumulative(path_part, name):
        return sum(ct for (f, _, n), (_, _, _, ct, _) in stats.items() if path_part in f and n == name)

    compiled = cumulative("backend/torch/trace.py", "__call__")
    compiled += cumulative("torch/autograd/__init__", "grad")
    bound = cumulative("backend/torch/modules.py", "bound")  # the generator's frames: entering and leaving
    return {
        "seconds": round(total, 3),
        "compiled_forward_backward_share": round(compiled / total, 3),
        "wrapper_binding_share": round(bound / total, 4),
        "other_share": round(1 - (compiled + bound) / total, 3),
    }


def run():
    if keras.backend.backend() != "torch":
        return {}
    net, x, y = _trained()
    wrapped, twin = gradkit.from_torch(net, (1, 28, 28)), _keras_twin(net)
    np.testing.assert_allclose(wrapped.predict(x, verbose=0), twin.predict(x, verbose=0), atol=1e-4)
    load = os.getloadavg()[0]
    out = {"n": N, "eps": EPS, "n_queries": N_QUERIES}
    apgd, wrapped_apgd = _apgd(net, wrapped, twin, x, y)
    out.update(apgd)
    out.update(_evaluate(wrapped, twin, x, y))
    out["profile_wrapped_apgd"] = _profile(wrapped_apgd)
    out["load_average_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return {"torch_module": out}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
