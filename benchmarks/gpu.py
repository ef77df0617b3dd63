"""GPU benchmark (issues 7, 33): FGSM, PGD-10, APGD-CE and Square on a 5-model ensemble of small ResNets,
32x32x3, batch 1024.

Self-contained: builds random-weight models (speed does not depend on the weights), runs each backend
in its own process (JAX and PyTorch by default), and writes JSON. For each backend it reports images per
second of gradkit's FGSM, PGD-10, APGD-CE (10 steps) and Square (100 queries, forward passes only), and
the ratio of the gradient attacks to the bare compiled forward+backward of the same five models on the
same batch (one gradient call for FGSM, ten for PGD-10, eleven for APGD-CE's ten steps and start point;
goal <= 1.15, issue 33), and of Square to 100 bare compiled forward passes. The attacks keep their
state on the device between steps (`attacks/_engine.py`).

    python benchmarks/gpu.py --out benchmarks/gpu_results.json            # on a GPU machine
    python benchmarks/gpu.py --quick                                      # tiny sizes, CPU smoke test
"""

import argparse
import json
import os
import subprocess
import sys
import time

WORKER = r"""
import json, sys, time
import keras, numpy as np, gradkit
from gradkit import backend

cfg = json.loads(sys.argv[1])
keras.utils.set_random_seed(0)

def block(x, filters, stride):
    y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    if stride != 1 or x.shape[-1] != filters:
        x = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
    return keras.layers.ReLU()(keras.layers.Add()([x, y]))

def resnet():
    inp = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(cfg["width"], 3, padding="same", activation="relu")(inp)
    for i, filters in enumerate([cfg["width"], 2 * cfg["width"], 4 * cfg["width"]]):
        x = block(x, filters, 1 if i == 0 else 2)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(10)(x))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

models = [resnet() for _ in range(cfg["k"])]
ensemble = gradkit.WeightedEnsemble(models, [1.0 / cfg["k"]] * cfg["k"])
n = cfg["batch"]
rng = np.random.RandomState(0)
x = rng.rand(n, 32, 32, 3).astype("float32")
y = rng.randint(0, 10, n)

def bare_loss(trainables, non_trainables, xb, yb, wb):
    total = 0.0
    for k, m in enumerate(models):
        out, _ = m.stateless_call(trainables[k], non_trainables[k], xb, training=False)
        ce = keras.ops.sparse_categorical_crossentropy(yb, out, from_logits=True)
        total = total + keras.ops.sum(ce * wb)
    return total

bare = backend.compile_grad(bare_loss, "x")
bare_fwd = backend.compile_forward(bare_loss)
tv = [backend.variable_values(m.trainable_variables) for m in models]
ntv = [backend.variable_values(m.non_trainable_variables) for m in models]
xt, yt = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
wt = keras.ops.convert_to_tensor(np.ones(n, np.float32))

def bare_call():
    _, g = bare(tv, ntv, xt, yt, wt)
    return keras.ops.convert_to_numpy(g)

def bare_forward_call():
    return keras.ops.convert_to_numpy(bare_fwd(tv, ntv, xt, yt, wt))

runs = {
    "bare_grad": bare_call,
    "bare_forward": bare_forward_call,
    "fgsm": lambda: gradkit.fgsm(ensemble, x, y, eps=8 / 255, clip_values=(0, 1)),
    "pgd10": lambda: gradkit.pgd(ensemble, x, y, eps=8 / 255, eps_step=2 / 255, steps=10,
                                 clip_values=(0, 1), random_start=False),
    "apgd_ce10": lambda: gradkit.apgd(ensemble, x, y, eps=8 / 255, steps=10, clip_values=(0, 1), seed=0,
                                      batch_size=n),
    "square100": lambda: gradkit.square(ensemble, x, y, eps=8 / 255, n_queries=100, clip_values=(0, 1),
                                        seed=0, batch_size=n),
}
for fn in runs.values():
    fn()  # compile
times = {name: [] for name in runs}
for _ in range(cfg["repeats"]):
    for name, fn in runs.items():
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)
med = {name: float(np.median(t)) for name, t in times.items()}

def devices():
    if keras.backend.backend() == "torch":
        import torch
        if torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return ["cpu"]
    return [str(d) for d in keras.distribution.list_devices()]

print("RESULT" + json.dumps({
    "backend": keras.backend.backend(),
    "devices": devices(),
    "k": cfg["k"], "batch": n,
    "bare_grad_ms": 1e3 * med["bare_grad"],
    "fgsm_images_per_s": n / med["fgsm"],
    "pgd10_images_per_s": n / med["pgd10"],
    "fgsm_over_bare": med["fgsm"] / med["bare_grad"],
    "pgd10_over_10_bare": med["pgd10"] / (10 * med["bare_grad"]),
    "apgd_ce10_images_per_s": n / med["apgd_ce10"],
    "apgd_ce10_over_11_bare": med["apgd_ce10"] / (11 * med["bare_grad"]),
    "square100_images_per_s": n / med["square100"],
    "square100_ms_per_query": 1e3 * med["square100"] / 100,
    "bare_forward_ms": 1e3 * med["bare_forward"],
    "square100_over_100_bare_forward": med["square100"] / (100 * med["bare_forward"]),
}))
"""


def run_backend(backend, cfg, timeout):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        return {"backend": backend, "error": done.stderr[-2000:]}
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))
    result = json.loads(line[len("RESULT") :])
    result["wall_s"] = time.time() - start
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="jax,torch")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "gpu_results.json"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a CPU smoke test")
    parser.add_argument("--timeout", type=int, default=140, help="seconds per backend")
    args = parser.parse_args(argv)
    cfg = {"k": 5, "batch": 1024, "width": 16, "repeats": 5}
    if args.quick:
        cfg = {"k": 2, "batch": 8, "width": 4, "repeats": 2}
    results = {"config": cfg, "date": time.strftime("%Y-%m-%d"), "runs": []}
    for backend in args.backends.split(","):
        results["runs"].append(run_backend(backend, cfg, args.timeout))
        print(json.dumps(results["runs"][-1], indent=2))
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2)
    os.replace(tmp, args.out)
    return 0 if all("error" not in r for r in results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
