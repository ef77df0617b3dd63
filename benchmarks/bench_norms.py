"""Cost of `grad_norm` in `fit`: GradientNormCallback vs plain fit vs a callback that recomputes the norm.

An MLP of about 1M parameters (784-1024-192-10), STEPS steps of batch 128 per `fit` call (200, as the
issue asks). On this shared 2-core VM one fit of the same model varies by 5-10% from fit to fit (load
from neighbours, in streaks), and one copy of a model can run up to 5% slower than an identical copy
for a whole run (where its buffers landed), both more than the overhead being measured. So two
identical models A and B each play both roles, and the fits come in pairs of rounds:

- round 1: fit A (tracked, GradientNormCallback), then B (plain); round 2: fit A (plain), then B
  (tracked). The product of the two rounds' tracked/plain ratios has A's and B's own speeds, and the
  first-or-second position, once in its numerator and once in its denominator: its square root is
  the pair's overhead, free of both effects to first order.
- overhead_ratio is the median over PAIRS of these pair overheads, with a bootstrap 95% interval.
- control pairs (every third pair) run the same two rounds with nothing tracked: control_ratio, the
  same estimator on two plain fits, is the noise floor of the measurement (1 up to noise).
- naive_ratio (median of naive / plain in rounds of their own, a third copy of the model: the
  recomputing callback doubles the step, so copy effects do not matter there) is for comparison.

Switching which model is tracked rebuilds its training function (a new trace on TensorFlow and
JAX): a one-step fit after each switch does that outside the timing.

Section "grad_norm_fit" of results.json: plain_s, tracked_s (median seconds per fit), overhead_ratio,
overhead_ci95, control_ratio, control_ci95, naive_ratio, the ratio of each pair (pair_overheads,
control_pair_ratios) and the settings.

    KERAS_BACKEND=jax python benchmarks/bench_norms.py      # BENCH_NORMS_STEPS, BENCH_NORMS_PAIRS
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
PAIRS = int(os.environ.get("BENCH_NORMS_PAIRS", 24))


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
    pair = [first, build(weights)]  # A and B: each is tracked in one round of a pair, plain in the other
    naive_model = build(weights)
    tracking = gradkit.GradientNormCallback()

    def fit(model, callbacks=(), steps=STEPS):
        start = time.perf_counter()
        model.fit(
            x[: steps * BATCH],
            y[: steps * BATCH],
            batch_size=BATCH,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=list(callbacks),
        )
        return time.perf_counter() - start

    def set_tracked(index):
        """Tracks pair[index] only (None: neither); builds both training functions, untimed."""
        for i, model in enumerate(pair):
            if i == index:
                fit(model, [tracking], steps=1)
            else:
                gradkit.untrack_gradient_norm(model)
                fit(model, steps=1)

    overhead, control, plain_s, tracked_s = [], [], [], []
    for p in range(PAIRS):
        is_control = p % 3 == 2
        ratios = []
        for index in (0, 1):  # the tracked model of this round
            tracked = None if is_control else index
            set_tracked(tracked)
            times = [fit(model, [tracking] if i == tracked else []) for i, model in enumerate(pair)]
            ratios.append(times[index] / times[1 - index])
            if not is_control:
                tracked_s.append(times[index])
                plain_s.append(times[1 - index])
        (control if is_control else overhead).append(float(np.sqrt(ratios[0] * ratios[1])))
    naive = []
    fit(naive_model, [NaiveNorm(x, y)], steps=2)
    gradkit.untrack_gradient_norm(pair[0])
    fit(pair[0], steps=1)
    for i in range(max(3, PAIRS // 3)):
        order = (pair[0], naive_model) if i % 2 == 0 else (naive_model, pair[0])
        times = {id(m): fit(m, [NaiveNorm(x, y)] if m is naive_model else []) for m in order}
        naive.append(times[id(naive_model)] / times[id(pair[0])])
    overhead_ratio, overhead_ci = median_ci(overhead)
    control_ratio, control_ci = median_ci(control)
    print(f"{keras.backend.backend()}: MLP with {n_params} parameters, {STEPS} steps x batch {BATCH}")
    return {
        "grad_norm_fit": {
            "plain_s": float(np.median(plain_s)),
            "tracked_s": float(np.median(tracked_s)),
            "overhead_ratio": overhead_ratio,
            "overhead_ci95": overhead_ci,
            "control_ratio": control_ratio,
            "control_ci95": control_ci,
            "naive_ratio": float(np.median(naive)),
            "steps": STEPS,
            "batch_size": BATCH,
            "pair_overheads": [round(r, 4) for r in overhead],
            "control_pair_ratios": [round(r, 4) for r in control],
            "params": n_params,
        }
    }


if __name__ == "__main__":
    merge(run())
