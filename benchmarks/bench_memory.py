"""`gradkit.evaluate` on a generator: the resident memory of 20,000 points against 1,000 (issue 47, goal:
the peak RSS delta of 20,000 points within 1.2x that of 1,000).

Workload: a linear classifier on 32x32x3 inputs (3,072 features, 10 classes), points drawn a batch of 500
at a time by a generator (each batch from its own seed, labelled by the model itself so that every point
is attacked), `attacks=["fgsm"]`, Linf eps 0.03, `batch_size=500` (the block size). 20,000 such points
are 245 MB of float32: held in memory (and their `x_adv`), they would dominate the figure.

Each candidate runs in a fresh process (`python bench_memory.py --child MODE N`): the model is built and
one 500-point evaluation warms the compiled calls up, then the resident set size is read (psutil) every
5 ms by a thread during the measured evaluation; recorded is the peak minus the RSS just before it
(`peak_rss_delta_mb`), and its wall time. Candidates: `stream_1000`, `stream_20000` (generator),
and for contrast `arrays_20000` (the same points as numpy arrays in memory, made before the baseline is
read, so only the evaluation's own copies count), and the two stream candidates again with glibc's
mmap threshold fixed at 1 MiB (`_mmap`: see `_FIXED`). Recorded: the deltas, `stream_20000_over_1000`
and `stream_20000_over_1000_mmap` (goal <= 1.2), the whole process's peak RSS (`peak_rss_mb`) and its
ratio `stream_20000_over_1000_peak_rss`, the seconds and the load average.

Run standalone (`python benchmarks/bench_memory.py`) or via `benchmarks/run.py bench_memory`.
"""

import json
import os
import subprocess
import sys
import threading
import time

FEATURES, CLASSES, BATCH, EPS = (32, 32, 3), 10, 500, 0.03


def _model():
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input(FEATURES), keras.layers.Flatten(), keras.layers.Dense(CLASSES)])
    rng = np.random.default_rng(0)
    model.set_weights(
        [rng.normal(size=(3072, CLASSES)).astype("float32") * 0.02, np.zeros(CLASSES, "float32")]
    )
    return model


def _batches(model, n):
    import numpy as np

    kernel = model.get_weights()[0]
    for j in range(0, n, BATCH):
        x = np.random.default_rng(j).uniform(size=(min(BATCH, n - j), *FEATURES)).astype("float32")
        yield x, np.argmax(x.reshape(len(x), -1) @ kernel, 1)


def _peak_during(fn):
    import psutil

    process, peak, done = psutil.Process(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.005)

    before = process.memory_info().rss
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    peak[0] = max(peak[0], process.memory_info().rss)
    return peak[0] - before, seconds, result, peak[0]


def child(mode, n):
    import numpy as np

    import gradkit

    model = _model()
    options = dict(eps=EPS, attacks=["fgsm"], batch_size=BATCH, clip_values=(0.0, 1.0), verbose=0)
    gradkit.evaluate(model, _batches(model, BATCH), None, **options)  # compile and warm up
    if mode == "arrays":
        x, y = (np.concatenate(a) for a in zip(*_batches(model, n)))
        delta, seconds, result, peak = _peak_during(lambda: gradkit.evaluate(model, x, y, **options))
    else:
        delta, seconds, result, peak = _peak_during(
            lambda: gradkit.evaluate(model, _batches(model, n), None, **options)
        )
    report = {"delta_mb": delta / 2**20, "peak_mb": peak / 2**20, "seconds": seconds}
    print(json.dumps({**report, "robust": result.robust_accuracy}))


def _run_child(mode, n, extra_env=None):
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", mode, str(n)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(extra_env or {})},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# glibc raises its mmap threshold to the size of a freed block (up to 32 MiB), after which freed blocks
# of 6 MB stay in the heap: the RSS then counts memory no array holds. The `_mmap` candidates fix the
# threshold at 1 MiB, so that every block is returned when freed and the RSS counts live arrays.
_FIXED = {"MALLOC_MMAP_THRESHOLD_": str(2**20)}


def run():
    candidates = {
        "stream_1000": ("stream", 1000, None),
        "stream_20000": ("stream", 20000, None),
        "arrays_20000": ("arrays", 20000, None),
        "stream_1000_mmap": ("stream", 1000, _FIXED),
        "stream_20000_mmap": ("stream", 20000, _FIXED),
    }
    results = {k: _run_child(*v) for k, v in candidates.items()}
    delta = {k: v["delta_mb"] for k, v in results.items()}
    section = {
        **{f"{k}_peak_rss_delta_mb": round(v, 1) for k, v in delta.items()},
        **{f"{k}_seconds": round(v["seconds"], 2) for k, v in results.items()},
        "stream_20000_over_1000": round(delta["stream_20000"] / delta["stream_1000"], 3),
        "stream_20000_over_1000_mmap": round(delta["stream_20000_mmap"] / delta["stream_1000_mmap"], 3),
        **{f"{k}_peak_rss_mb": round(v["peak_mb"], 1) for k, v in results.items()},
        "stream_20000_over_1000_peak_rss": round(
            results["stream_20000"]["peak_mb"] / results["stream_1000"]["peak_mb"], 3
        ),
        "load_average": os.getloadavg()[0],
    }
    return {"memory": section}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from common import merge

        merge(run())
