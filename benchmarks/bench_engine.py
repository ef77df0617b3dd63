"""Gradient engine: flat per-call cost, no growth, ensemble cost vs the bare forward+backward limit.

Sections written to results.json under the backend:
  input_gradient: call2_ms, call1000_ms, call_ratio (<= 1.05), naive_over_gradkit, rss_growth (<= 2%)
  ensemble: k, gradkit_ms, limit_ms, limit_ratio (<= 1.15)
"""

import os
import sys
import time

import keras
import numpy as np
import psutil
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradkit  # noqa: E402
from gradkit import backend  # noqa: E402

import naive  # noqa: E402
from common import alternating, merge  # noqa: E402


def cnn(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def digits():
    data = load_digits()
    return (data.images / 16.0).astype(np.float32)[..., None], data.target.astype(np.int32)


def input_gradient_section(x, y):
    """Call 2 vs call 1000, side by side: a function that has already made 1,000 calls and a fresh
    one making its calls 2.. are timed alternately (so machine noise hits both alike), plus RSS."""
    model = cnn(0)
    xb, yb = x[:256], y[:256]
    old = gradkit.InputGradient(model)
    process = psutil.Process()
    for _ in range(10):
        old(xb, yb)
    rss10 = process.memory_info().rss
    for _ in range(989):
        old(xb, yb)
    rss1000 = process.memory_info().rss
    fresh = gradkit.InputGradient(model)
    fresh(xb, yb)  # call 1 compiles
    early, late = [], []
    for _ in range(20):  # fresh: calls 2..21; old: calls 1000..1019
        for fn, sink in ((fresh, early), (old, late)):
            start = time.perf_counter()
            fn(xb, yb)
            sink.append(time.perf_counter() - start)
    call2, call1000 = np.median(early), np.median(late)
    models = [cnn(s) for s in range(5)]
    ens = gradkit.InputGradient(gradkit.WeightedEnsemble(models, [0.2] * 5))
    ens(xb, yb)
    med = alternating(
        {"gradkit": lambda: ens(xb, yb), "naive": lambda: naive.ensemble_gradient(models, [0.2] * 5, xb, yb)},
        repeats=7,
    )
    return {
        "call2_ms": 1e3 * call2,
        "call1000_ms": 1e3 * call1000,
        "call_ratio": call1000 / call2,
        "naive_over_gradkit": med["naive"] / med["gradkit"],
        "rss_growth": rss1000 / rss10 - 1.0,
        "trace_count": old.trace_count,
    }


def bare_member_call(model):
    """One model's forward+backward w.r.t. x, compiled, with no gradkit validation or batching."""

    def loss(trainable, non_trainable, x, y, w):
        out, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return keras.ops.sum(keras.ops.sparse_categorical_crossentropy(y, out, from_logits=True) * w)

    grad = backend.compile_grad(loss, "x")
    trainable = backend.variable_values(model.trainable_variables)
    non_trainable = backend.variable_values(model.non_trainable_variables)

    def call(xt, yt, wt):
        _, g = grad(trainable, non_trainable, xt, yt, wt)
        return keras.ops.convert_to_numpy(g)

    return call


def ensemble_section(x, y, k=5):
    models = [cnn(s) for s in range(k)]
    fn = gradkit.InputGradient(gradkit.WeightedEnsemble(models, [1.0 / k] * k))
    bare = [bare_member_call(m) for m in models]
    xt, yt = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    wt = keras.ops.convert_to_tensor(np.ones(len(y), np.float32))

    def limit():
        return [b(xt, yt, wt) for b in bare]

    fn(x, y)
    limit()
    med = alternating({"gradkit": lambda: fn(x, y), "limit": limit}, repeats=9)
    return {
        "k": k,
        "n": int(len(y)),
        "gradkit_ms": 1e3 * med["gradkit"],
        "limit_ms": 1e3 * med["limit"],
        "limit_ratio": med["gradkit"] / med["limit"],
    }


def run():
    x, y = digits()
    return {"input_gradient": input_gradient_section(x, y), "ensemble": ensemble_section(x, y)}


if __name__ == "__main__":
    merge(run())
