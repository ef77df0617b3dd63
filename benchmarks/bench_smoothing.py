"""Randomized smoothing's sampling against a bare batched forward of the same rows (issue 45).

`gradkit.smooth(model, sigma).counts(x, n)` draws `n` noisy copies of each of `m` points, decides them on
the compiled forward and counts the decisions on the device. The baseline is the same compiled decision
(`AttackGradient.bind_decision`) called on the same number of rows, already on the device, with no
noise and no counting. Recorded: samples per second of both and their ratio (goal: smoothing at >= 0.9
of the bare forward's throughput on a GPU; on a CPU the Gaussian draws themselves cost about as much
as a small CNN's forward pass).

Run: `python benchmarks/run.py bench_smoothing` (or this file; about a minute per backend).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import gradkit  # noqa: E402
from gradkit import backend  # noqa: E402
from gradkit.gradients import AttackGradient  # noqa: E402

from common import alternating, merge  # noqa: E402

BATCH, POINTS, SAMPLES = 1000, 4, 2000


def _cnn():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )


def run(repeats=5):
    model = _cnn()
    x = np.random.RandomState(0).rand(POINTS, 8, 8, 1).astype("float32")
    smoothed = gradkit.smooth(model, 0.25, batch_size=BATCH, seed=0, verbose=0)
    decision, rows = AttackGradient(model, batch_size=BATCH).bind_decision()
    batches = [backend.to_tensor(np.repeat(x[i : i + 1], rows, axis=0)) for i in range(POINTS)]
    calls = POINTS * SAMPLES // BATCH

    def bare():
        out = [decision(batches[i % POINTS]) for i in range(calls)]
        backend.to_numpy(out[-1])

    def smoothing():
        smoothed.counts(x, SAMPLES)

    bare(), smoothing()  # compiled and warm
    times = alternating({"bare": bare, "smoothing": smoothing}, repeats=repeats)
    total = POINTS * SAMPLES
    figures = {f"{name}_samples_per_s": total / t for name, t in times.items()}
    figures["smoothing_over_bare_throughput"] = times["bare"] / times["smoothing"]
    figures.update(batch=BATCH, points=POINTS, samples=SAMPLES, model="8x8x1 Conv2D(16) Dense(10)")
    return {"smoothing": figures}


if __name__ == "__main__":
    merge(run())
