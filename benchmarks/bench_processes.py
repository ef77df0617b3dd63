"""`gradkit evaluate` in 2 processes vs 1 on the same machine, where the attack dominates (goal <= 0.65x).

A wide version of the study's digits CNN (two 3x3 convolutions of 64 and 128 filters instead of 16 and 32,
2x2 max-pools, softmax), trained for 3 epochs on the study's digits split and saved as a .keras file,
evaluated on all 450 test digits with the standard version (APGD-CE, APGD-T, FAB-T at `STEPS` steps,
Square at `QUERIES` queries), Linf eps 0.1, batch 64 (8 blocks: 4 per process). The width makes the
attack dominate the command on every backend (the study's own CNN at 20 steps did on PyTorch, not on
JAX, whose start-up and compilation took most of a run); on JAX about 16 s of a 40-46 s run is still
start-up and compilation (docs/scaling.md). Each candidate is the whole command,
start-up included:

- `one`: `python -m gradkit evaluate ...` (one process, the framework's default threads);
- `thread` (PyTorch only): the same with OMP_NUM_THREADS=1, the setting torchrun gives each process (a
  loaded machine punishes PyTorch's default threads: see docs/scaling.md);
- `two`: 2 processes on localhost, each evaluating a contiguous part of the points:
  `torchrun --standalone --nproc-per-node 2 -m gradkit evaluate ...` on PyTorch (gloo; torchrun sets
  OMP_NUM_THREADS=1 per process), two processes joined by `jax.distributed` on JAX (CPU collectives
  through gloo). TensorFlow has no process group: nothing is measured there.
- `mesh` (JAX only): the same two processes with `--mesh`, one `keras.distribution.DataParallel` mesh
  over both processes' devices: every compiled call's batch split between them, results gathered.

Recorded: `two_over_one` (wall time; the median of `REPEATS` alternated runs; `mesh_over_one` on JAX),
the CPU seconds of each candidate's processes (`one_cpu_seconds`, `two_cpu_seconds`), the cores one
process keeps busy (`cores_busy_in_one`: a process that already uses both cores leaves a second one
little to gain) and `two_over_one_cpu_floor` (two processes' CPU seconds spread over every core, over one
process's wall time: no scheduling can bring two_over_one under it),
the medians, the seconds the attacks took inside one process (from evaluation.json, to show they
dominate; their compilations included) and the rest of that run's wall time (`other_seconds_in_one`:
imports, model load, the clean pass, writing), the machine's load average before and after, and whether
each wrote the one-process samples.csv.

Why this workload and not the command's defaults (100 steps, 5000 queries): the attacks already take
85-90% of a one-process run here (the "attack dominates" of issue 30), while at the defaults a
one-process run would take about 4-5 minutes (estimated from the per-attack seconds: Square about 10x
its 500-query time), paid by three candidates per round per backend in `make bench`, the mesh 3-4x
more. The per-process costs (imports, load, compilations) are the same in both workloads and the
attacks' work splits in both; the smaller workload weighs those costs more, so it is the stricter test.

Run standalone (`python benchmarks/bench_processes.py`) or via `benchmarks/run.py bench_processes`; on a
quiet machine for a figure that means something (the load average is recorded beside it).
"""

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from common import machine  # noqa: E402

STEPS, QUERIES = 50, 500
REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))  # alternated runs per candidate
ARGS = [
    "digits",
    "--n-points",
    "450",
    "--eps",
    "0.1",
    "--steps",
    str(STEPS),
    "--n-queries",
    str(QUERIES),
    "--batch-size",
    "64",
]


def _model(folder):
    from gradkit import study

    keras.utils.set_random_seed(0)
    data = study.load_dataset("digits")
    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input(data.x_train.shape[1:]),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(128, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(data.n_classes, activation="softmax"),
        ]
    )
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(data.x_train, data.y_train, epochs=3, batch_size=32, verbose=0)
    path = os.path.join(folder, "cnn.keras")
    model.save(path)
    return path


def _port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _command(n, model, out):
    """The commands and environments of candidate `n`: 1, "thread" (1 with OMP_NUM_THREADS=1, as torchrun
    sets per process), 2 (a contiguous part each) or "mesh" (JAX)."""
    evaluate = ["-m", "gradkit", "evaluate", model, *ARGS, "--no-progress", "--out", out]
    evaluate += ["--mesh"] if n == "mesh" else []
    if n in (1, "thread"):
        return [[sys.executable, *evaluate]], [{**os.environ, **({"OMP_NUM_THREADS": "1"} if n != 1 else {})}]
    if keras.backend.backend() == "torch":
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        return [[*torchrun, *evaluate]], [dict(os.environ)]  # torchrun's own -m: run gradkit as a module
    env = {**os.environ, "JAX_COORDINATOR_ADDRESS": f"localhost:{_port()}", "JAX_NUM_PROCESSES": "2"}
    return [[sys.executable, *evaluate]] * 2, [{**env, "JAX_PROCESS_ID": str(i)} for i in range(2)]


def _cpu_seconds():
    """User + system CPU seconds of every finished child process so far (grandchildren included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(n, model, out):
    """(wall seconds, CPU seconds of all its processes) of candidate `n`."""
    commands, envs = _command(n, model, out)
    cpu = _cpu_seconds()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(c, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for c, e in zip(commands, envs)
    ]
    errors = [p.communicate()[1] for p in procs]
    if any(p.returncode for p in procs):
        text = b"\n".join(errors).decode()
        said = [line for line in text.splitlines() if "error:" in line or "can't open file" in line]
        raise RuntimeError("\n".join(said) or text[-2000:])
    return time.perf_counter() - start, _cpu_seconds() - cpu


def _candidates():
    return (1, 2, "mesh") if keras.backend.backend() == "jax" else (1, 2, "thread")


def run():
    if keras.backend.backend() == "tensorflow":
        return {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        model = _model(folder)
        times = {n: [] for n in _candidates()}
        cpu = {n: [] for n in times}
        for _ in range(REPEATS):
            for n in times:
                wall, used = _time(n, model, os.path.join(folder, f"out{n}"))
                times[n].append(wall)
                cpu[n].append(used)
        same = {n: open(os.path.join(folder, f"out{n}", "samples.csv")).read() for n in times}
        with open(os.path.join(folder, "out1", "evaluation.json")) as f:
            attack_seconds = sum(
                r["per_attack"][a]["seconds"] for r in json.load(f)["results"] for a in r["per_attack"]
            )
    median = {n: float(np.median(t)) for n, t in times.items()}
    record = {
        "two_over_one": round(median[2] / median[1], 3),
        "one_seconds": round(median[1], 2),
        "two_seconds": round(median[2], 2),
        "one_runs": [round(t, 2) for t in times[1]],
        "two_runs": [round(t, 2) for t in times[2]],
        "attack_seconds_in_one": round(attack_seconds, 2),
        "other_seconds_in_one": round(times[1][-1] - attack_seconds, 2),
        "same_samples_csv": same[2] == same[1],
        # How many cores the one process kept busy, and the floor its CPU work puts under two processes
        # on this machine's cores: their CPU seconds (the attack's work split, the start-up paid twice)
        # over the cores, against one process's wall time.
        "one_cpu_seconds": round(float(np.median(cpu[1])), 2),
        "two_cpu_seconds": round(float(np.median(cpu[2])), 2),
        "cores_busy_in_one": round(float(np.median(cpu[1])) / median[1], 2),
        "two_over_one_cpu_floor": round(float(np.median(cpu[2])) / (os.cpu_count() or 1) / median[1], 3),
    }
    if "thread" in times:  # PyTorch: how much of the ratio is torchrun's one thread per process
        record.update(
            two_over_one_thread=round(median[2] / median["thread"], 3),
            one_thread_runs=[round(t, 2) for t in times["thread"]],
        )
    if "mesh" in times:  # JAX: one keras.distribution mesh over both processes' devices
        record.update(
            mesh_over_one=round(median["mesh"] / median[1], 3),
            mesh_runs=[round(t, 2) for t in times["mesh"]],
            mesh_same_samples_csv=same["mesh"] == same[1],
        )
    return {
        "processes": {
            **record,
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "machine": machine(),
            "goal": "two_over_one <= 0.65",
        }
    }


if __name__ == "__main__":
    from common import merge

    merge(run())
