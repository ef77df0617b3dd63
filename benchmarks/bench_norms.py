"""Cost of `grad_norm` in `fit`: GradientNormCallback vs plain fit vs a callback that recomputes the norm.

An MLP of about 1M parameters (784-1024-192-10), STEPS steps of batch 128 per `fit` call (200, as the
issue asks). On this shared 2-core VM the machine's speed drifts by 10-15% in streaks of seconds
(a numpy matmul loop shows the same streaks; no steal time is reported), more than the overhead being
measured, and one copy of a model can run a few % slower than an identical copy. So:

- The two fits of a round run at the same time, in two threads that take turns: each runs BURST (20)
  steps, then hands the turn to the other (a batch-begin callback; JAX first waits for its queued
  steps). Each fit's time is its wall time less the time it waited for its turn. Both fits thus see
  the same streaks; within a burst the caches stay warm as in a normal fit. Not on TensorFlow (see
  LOCKSTEP below), where the two fits of a round run one after the other.
- Two identical models A and B each play both roles: round 1 tracks A (GradientNormCallback), round 2
  tracks B. The square root of the product of the two rounds' tracked/plain ratios is the pair's
  overhead, free of each copy's own speed and of who starts (A always does).
- overhead_ratio is the median over the pairs, with a bootstrap 95% interval. Control pairs (every
  third pair) run the same two rounds with nothing tracked: control_ratio is the noise floor (1 up to
  noise).
- naive_ratio (median of naive / plain in sequential rounds of their own, a third copy of the model:
  the recomputing callback doubles the step, so drift and copy effects do not matter there) is for
  comparison.

Switching which model is tracked rebuilds its training function (a new trace on TensorFlow and
JAX): a one-step fit after each switch does that outside the timing. With `every_n_steps=n` the
recorded steps and the others run two training functions (`gradkit.monitor._chosen_steps`), each traced
on its first call: the tracked model's fit then runs n + 1 steps, which call both. The turn-taking callback
implements no batch-end hook, so Keras keeps dispatching the batch-end callbacks asynchronously as
in a plain fit.

The tracked model is tracked with `track_gradient_norm` (what `GradientNormCallback` installs for the
length of a `fit`; the callback itself removes it at the end of each `fit`, so each `fit` with it
builds its training function anew, which would put a trace inside the timing).

Section "grad_norm_fit" of results.json: plain_s, tracked_s (median seconds per fit), overhead_ratio,
overhead_ci95, control_ratio, control_ci95, naive_ratio, the ratio of each pair (pair_overheads,
control_pair_ratios), the design and the settings. Section "diagnostics_fit" (issue 31): the same
measurement (overhead_ratio, its interval, the control, the goal) for each variant of `VARIANTS`:
every group but the noise scale, every group (`include="all"`: the noise scale's extra pass over half
of each batch included), and the latter with `every_n_steps=100`; plain_s and tracked_s too. The
variants "params_only", "updates_only" and "health_only" measure one group each (goal null): their
overheads add up to "all_groups" less the shared bookkeeping, the measured floor of that variant.

    KERAS_BACKEND=jax python benchmarks/bench_norms.py

Settings: BENCH_NORMS_STEPS (200), BENCH_NORMS_PAIRS (24), BENCH_NORMS_BURST (20), BENCH_NORMS_LOCKSTEP,
BENCH_NORMS_VARIANTS (comma-separated names of `VARIANTS`; all by default).
"""

import os
import sys
import threading
import time

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradkit  # noqa: E402

from common import merge  # noqa: E402

STEPS = int(os.environ.get("BENCH_NORMS_STEPS", 200))
BATCH = 128
PAIRS = int(os.environ.get("BENCH_NORMS_PAIRS", 24))
BURST = int(os.environ.get("BENCH_NORMS_BURST", 20))
# Turn-taking everywhere but TensorFlow, whose fit prefetches batches in tf.data threads that keep
# running during the other fit's turn (measured: pairs and controls scatter +-30% that way, against
# +-10-15% for sequential fits). BENCH_NORMS_LOCKSTEP=1 or 0 forces one design.
LOCKSTEP = os.environ.get("BENCH_NORMS_LOCKSTEP", str(int(keras.backend.backend() != "tensorflow"))) == "1"
# name: (track_gradient_norm arguments, the goal for the overhead ratio)
GROUPS_BUT_NOISE = ("norm", "clipped", "params", "updates", "health")
VARIANTS = {
    "grad_norm": ({}, 1.05),
    "all_groups": ({"include": GROUPS_BUT_NOISE}, 1.05),  # every group but noise_scale (and histograms)
    "all_groups_noise_scale": ({"include": "all"}, 1.15),  # every group, noise_scale included
    "all_groups_every_100": ({"include": "all", "every_n_steps": 100}, 1.01),
    # One group at a time (no goal of their own): what each group's passes cost, the floor under
    # "all_groups" where no backend's CPU compiler fuses separate reductions into one pass.
    "params_only": ({"include": ("params",)}, None),  # one pass over the weights before the step
    "updates_only": ({"include": ("updates",)}, None),  # the weights before and after, and their change
    "health_only": ({"include": ("health",)}, None),  # max |g| and the zero count (two passes over g)
}
CHOSEN = [v for v in os.environ.get("BENCH_NORMS_VARIANTS", ",".join(VARIANTS)).split(",") if v]


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


class Turns(keras.callbacks.Callback):
    """Makes two concurrent fits take turns: BURST steps each; counts the time spent waiting."""

    async_safe = True  # no batch-end hook: Keras keeps its usual asynchronous batch-end dispatch

    def __init__(self, shared, me):
        super().__init__()
        self.shared, self.me, self.waited = shared, me, 0.0

    def _wait(self):
        start = time.perf_counter()
        with self.shared["cond"]:
            self.shared["cond"].wait_for(lambda: self.shared["turn"] == self.me or self.shared["done"])
        self.waited += time.perf_counter() - start

    def hand_over(self, done=False):
        with self.shared["cond"]:
            self.shared["turn"] = 1 - self.me
            self.shared["done"] = self.shared["done"] or done
            self.shared["cond"].notify_all()

    def on_train_begin(self, logs=None):
        self._wait()

    def on_train_batch_begin(self, batch, logs=None):
        if batch and batch % BURST == 0:
            state = getattr(self.model, "_jax_state", None)  # JAX: wait for the queued steps
            if state:
                keras.ops.convert_to_numpy(state["trainable_variables"][-1])
            self.hand_over()
            self._wait()

    def on_train_end(self, logs=None):
        self.hand_over(done=True)


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
    tracking = {}  # the track_gradient_norm arguments of the variant being measured

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

    def lockstep(callbacks):
        """Fits A and B at once, taking turns (A starts); each fit's seconds less its waits."""
        shared = {"cond": threading.Condition(), "turn": 0, "done": False}
        turns = [Turns(shared, i) for i in (0, 1)]
        times, errors = [None, None], []

        def fit_in_turns(i):
            try:
                times[i] = fit(pair[i], callbacks[i] + [turns[i]]) - turns[i].waited
            except BaseException as error:  # let the other fit finish, then raise
                errors.append(error)
                turns[i].hand_over(done=True)

        threads = [threading.Thread(target=fit_in_turns, args=(i,)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return times

    def set_tracked(index):
        """Tracks pair[index] only (None: neither); builds both training functions, untimed."""
        for i, model in enumerate(pair):
            if i == index:
                gradkit.track_gradient_norm(model, **tracking)
            else:
                gradkit.untrack_gradient_norm(model)
            fit(model, steps=1 + tracking.get("every_n_steps", 0) if i == index else 1)

    def measure():
        overhead, control, plain_s, tracked_s = [], [], [], []
        for p in range(PAIRS):
            is_control = p % 3 == 2
            ratios = []
            for index in (0, 1):  # the tracked model of this round
                set_tracked(None if is_control else index)
                times = lockstep([[], []]) if LOCKSTEP else [fit(m) for m in pair]
                ratios.append(times[index] / times[1 - index])
                if not is_control:
                    tracked_s.append(times[index])
                    plain_s.append(times[1 - index])
            (control if is_control else overhead).append(float(np.sqrt(ratios[0] * ratios[1])))
        return overhead, control, plain_s, tracked_s

    sections = {"diagnostics_fit": {}}
    for name in CHOSEN:
        kwargs, goal = VARIANTS[name]
        tracking.clear()
        tracking.update(kwargs)
        overhead, control, plain_s, tracked_s = measure()
        ratio, ci = median_ci(overhead)
        control_ratio, control_ci = median_ci(control)
        sections["diagnostics_fit"][name] = {
            "arguments": {k: str(v) for k, v in kwargs.items()},
            "plain_s": float(np.median(plain_s)),
            "tracked_s": float(np.median(tracked_s)),
            "load_average": [round(v, 1) for v in os.getloadavg()],
            "overhead_ratio": ratio,
            "overhead_ci95": ci,
            "control_ratio": control_ratio,
            "control_ci95": control_ci,
            "goal": goal,
            "pairs": PAIRS,
            "steps": STEPS,
        }
        print(f"{name}: {ratio:.3f}x (95% CI {ci[0]:.3f}-{ci[1]:.3f}), control {control_ratio:.3f}x")
        if name == "grad_norm":
            sections["grad_norm_fit"] = dict(
                plain_s=float(np.median(plain_s)), tracked_s=float(np.median(tracked_s)), overhead=overhead
            )
    if "all_groups" in CHOSEN:
        sections["diagnostics_fit"]["statistics_alone"] = statistics_alone()
    if "grad_norm_fit" not in sections:
        return sections
    naive = []
    fit(naive_model, [NaiveNorm(x, y)], steps=2)
    gradkit.untrack_gradient_norm(pair[0])
    fit(pair[0], steps=1)
    for i in range(max(3, PAIRS // 3)):
        order = (pair[0], naive_model) if i % 2 == 0 else (naive_model, pair[0])
        times = {id(m): fit(m, [NaiveNorm(x, y)] if m is naive_model else []) for m in order}
        naive.append(times[id(naive_model)] / times[id(pair[0])])
    print(f"{keras.backend.backend()}: MLP with {n_params} parameters, {STEPS} steps x batch {BATCH}")
    main = sections["diagnostics_fit"]["grad_norm"]
    overhead = sections["grad_norm_fit"].pop("overhead")
    sections["grad_norm_fit"].update(
        overhead_ratio=main["overhead_ratio"],
        overhead_ci95=main["overhead_ci95"],
        control_ratio=main["control_ratio"],
        control_ci95=main["control_ci95"],
        naive_ratio=float(np.median(naive)),
        steps=STEPS,
        batch_size=BATCH,
        design=f"turns of {BURST} steps" if LOCKSTEP else "sequential fits",
        pair_overheads=[round(r, 4) for r in overhead],
        params=n_params,
    )
    return sections


def compiled(fn):
    """`fn` as the training step runs it: inside a jit (JAX), a tf.function (TensorFlow), eager (PyTorch)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        jitted = jax.jit(fn)
        return lambda *a: jax.block_until_ready(jitted(*a))
    if backend == "tensorflow":
        import tensorflow as tf

        traced = tf.function(fn, autograph=False)
        return lambda *a: keras.ops.convert_to_numpy(traced(*a))
    return lambda *a: keras.ops.convert_to_numpy(fn(*a))


def statistics_alone(reps=100, rounds=7):
    """The floor under "all_groups": the per-weight statistics of every group but the noise scale
    (`gradkit.backend.weight_stats`, as the step computes them) on the MLP's gradient-shaped tensors,
    compiled alone, in ms per call (fastest of `rounds`), next to one column ("sq", a single pass over
    the gradients, what "grad_norm" adds) and to the plain step's ms (the fastest of `rounds` fits)."""
    from gradkit import backend
    from gradkit.monitor import _groups

    model = build()
    shapes = [tuple(w.shape) for w in model.trainable_weights]
    rng = np.random.RandomState(1)
    draw = lambda: [keras.ops.convert_to_tensor(rng.randn(*s).astype(np.float32)) for s in shapes]  # noqa: E731
    grads, before = draw(), draw()
    after = [w - 0.01 * g for w, g in zip(before, grads)]
    columns = _groups.columns(GROUPS_BUT_NOISE, None)

    def best(fn, *args):
        fn(*args)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(reps):
                fn(*args)
            times.append((time.perf_counter() - start) / reps * 1e3)
        return min(times)

    stats = compiled(lambda g, w0, w1: backend.weight_stats(g, w0, w1, columns, shapes))
    one = compiled(lambda g: backend.weight_stats(g, None, None, ("sq",), shapes))
    rng2 = np.random.RandomState(0)
    x = rng2.rand(STEPS * BATCH, 784).astype(np.float32)
    y = rng2.randint(0, 10, STEPS * BATCH)
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)
    fits = []
    for _ in range(rounds):
        start = time.perf_counter()
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        fits.append((time.perf_counter() - start) / STEPS * 1e3)
    result = {
        "columns": list(columns),
        "statistics_ms": round(best(stats, grads, before, after), 4),
        "one_pass_ms": round(best(one, grads), 4),
        "plain_step_ms": round(min(fits), 4),
        "load_average": [round(v, 1) for v in os.getloadavg()],
    }
    result["floor_ratio"] = round(1 + result["statistics_ms"] / result["plain_step_ms"], 4)
    result["one_pass_ratio"] = round(1 + result["one_pass_ms"] / result["plain_step_ms"], 4)
    print(f"statistics alone: {result}")
    return result


if __name__ == "__main__":
    merge(run())
