"""Cost of `grad_norm` in `fit`: GradientNormCallback vs plain fit vs a callback that recomputes the norm.

An MLP of about 1M parameters (784-1024-192-10), STEPS steps of batch 128 per `fit` call (200, as the
issue asks). Four copies of the model with the same weights: two plain ones (`plain`, `control`),
`tracked` (GradientNormCallback) and `naive` (a callback that recomputes the gradient of each batch).

Each round fits plain, tracked and control once, in an order that rotates from round to round. On this
shared 2-core VM one fit of the same model varies by 5-10% from round to round (load from neighbours,
in streaks), and one copy of a model can run a few % slower than another for the whole run, both more
than the overhead being measured, so:

- overhead_ratio is the median over ROUNDS of tracked / (mean of the two plain fits of the round),
  with a bootstrap 95% interval (overhead_ci95);
- control_ratio is the median of control / plain, the two identical plain models: the noise floor of
  the measurement. An overhead_ratio means something only to about |control_ratio - 1|.
- naive_ratio (median of naive / plain, in rounds of their own: the run after naive is slowed by its
  leftovers) is there for comparison.

Section "grad_norm_fit" of results.json: plain_s, tracked_s (median seconds per fit), overhead_ratio,
overhead_ci95, control_ratio, control_ci95, naive_ratio, and the settings.

    KERAS_BACKEND=jax python benchmarks/bench_norms.py      # BENCH_NORMS_STEPS, BENCH_NORMS_ROUNDS
"""

import os
import sys
import time

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradkit  # noqa: E402

from common import merge  # noqa: E402

STEPS = int(os.environ.get("BENCH_NORMS_STEPS", 200))
BATCH = 128
ROUNDS = int(os.environ.get("BENCH_NORMS_ROUNDS", 21))


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


def median_ci(ratios, seed=0, n=2000):
    """Median of `ratios` and a bootstrap 95% interval for it."""
    ratios = np.asarray(ratios)
    rng = np.random.RandomState(seed)
    medians = np.median(rng.choice(ratios, (n, len(ratios))), axis=1)
    return float(np.median(ratios)), [float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))]


def run():
    rng = np.random.RandomState(0)
    x = rng.rand(STEPS * BATCH, 784).astype(np.float32)
    y = rng.randint(0, 10, STEPS * BATCH)
    first = build()
    n_params = first.count_params()
    weights = first.get_weights()
    models = {"plain": first, "tracked": build(weights), "control": build(weights), "naive": build(weights)}
    callbacks = {"tracked": [gradkit.GradientNormCallback()], "naive": [NaiveNorm(x, y)]}

    def fit(name):
        start = time.perf_counter()
        models[name].fit(
            x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks.get(name, [])
        )
        return time.perf_counter() - start

    for name in models:  # compile and warm up outside the timing
        fit(name)
    times = {name: [] for name in models}
    order = ["plain", "tracked", "control"]
    for i in range(ROUNDS):
        for name in order[i % 3 :] + order[: i % 3]:
            times[name].append(fit(name))
    for i in range(ROUNDS // 3 + 1):
        for name in ("plain", "naive") if i % 2 == 0 else ("naive", "plain"):
            times[name].append(fit(name))
    plain = np.array(times["plain"])
    baseline = (plain[:ROUNDS] + np.array(times["control"])) / 2
    overhead, overhead_ci = median_ci(np.array(times["tracked"]) / baseline)
    control, control_ci = median_ci(np.array(times["control"]) / plain[:ROUNDS])
    naive = float(np.median(np.array(times["naive"]) / plain[ROUNDS:]))
    print(f"{keras.backend.backend()}: MLP with {n_params} parameters, {STEPS} steps x batch {BATCH}")
    return {
        "grad_norm_fit": {
            "plain_s": float(np.median(plain[:ROUNDS])),
            "tracked_s": float(np.median(times["tracked"])),
            "overhead_ratio": overhead,
            "overhead_ci95": overhead_ci,
            "control_ratio": control,
            "control_ci95": control_ci,
            "naive_ratio": naive,
            "steps": STEPS,
            "batch_size": BATCH,
            "rounds": ROUNDS,
            "params": n_params,
        }
    }


if __name__ == "__main__":
    merge(run())
