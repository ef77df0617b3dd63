"""Cost of `grad_norm` in `fit`: GradientNormCallback vs plain fit vs a callback that recomputes the norm.

An MLP of about 1M parameters (784-1024-192-10), STEPS steps of batch 128 per `fit` call. Plain and
tracked are timed in back-to-back pairs (`common.alternating`), then plain and naive; each
candidate has its own copy of the model with the same weights. Section "grad_norm_fit" of
results.json: plain_s, tracked_s (median seconds per fit call), overhead_ratio and naive_ratio (median
over rounds of tracked / plain and naive / plain, each pair timed back to back).

STEPS defaults to 25, not the 200 of the issue: on the shared 2-core machine one backend's run with 200
steps took several minutes. Set BENCH_NORMS_STEPS=200 (and BENCH_NORMS_REPEATS) on a quiet machine.

    KERAS_BACKEND=jax python benchmarks/bench_norms.py
"""

import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradkit  # noqa: E402

from common import alternating, merge  # noqa: E402

STEPS = int(os.environ.get("BENCH_NORMS_STEPS", 25))
BATCH = 128
REPEATS = int(os.environ.get("BENCH_NORMS_REPEATS", 15))


def build(weights=None):
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(192, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    if weights is not None:
        model.set_weights(weights)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class NaiveNorm(keras.callbacks.Callback):
    """The usual workaround: recompute the gradient of the batch after each step (a second pass)."""

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y, self.values = x, y, []

    def on_train_batch_end(self, batch, logs=None):
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:  # JAX keeps the live weights outside the variables during fit
            sync()
        rows = slice(batch * BATCH, (batch + 1) * BATCH)
        self.values.append(gradkit.gradient_norm(self.model, self.x[rows], self.y[rows]))


def run():
    rng = np.random.RandomState(0)
    x = rng.rand(STEPS * BATCH, 784).astype(np.float32)
    y = rng.randint(0, 10, STEPS * BATCH)
    first = build()
    n_params = first.count_params()
    weights = first.get_weights()
    models = {"plain": first, "tracked": build(weights), "naive": build(weights)}
    callbacks = {"plain": [], "tracked": [gradkit.GradientNormCallback()], "naive": [NaiveNorm(x, y)]}

    def fit(name):
        return lambda: models[name].fit(
            x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks[name]
        )

    for name in models:  # compile and warm up outside the timing
        fit(name)()

    def rounds(other, n):
        """Paired rounds: plain and `other` back to back (common.alternating), first one alternating."""
        pairs = [("plain", other), (other, "plain")]
        return [alternating({name: fit(name) for name in pairs[i % 2]}, 1) for i in range(n)]

    # The ratio is the median of the rounds' ratios, robust to load that changes between rounds. Naive
    # is timed in rounds of its own: the run that follows it is slowed by its leftovers.
    tracked = rounds("tracked", REPEATS)
    naive = rounds("naive", REPEATS // 2 + 1)
    print(f"{keras.backend.backend()}: MLP with {n_params} parameters, {STEPS} steps x batch {BATCH}")
    return {
        "grad_norm_fit": {
            "plain_s": float(np.median([r["plain"] for r in tracked])),
            "tracked_s": float(np.median([r["tracked"] for r in tracked])),
            "overhead_ratio": float(np.median([r["tracked"] / r["plain"] for r in tracked])),
            "naive_ratio": float(np.median([r["naive"] / r["plain"] for r in naive])),
            "steps": STEPS,
            "batch_size": BATCH,
            "rounds": REPEATS,
            "params": n_params,
        }
    }


if __name__ == "__main__":
    merge(run())
