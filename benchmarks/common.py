"""Helpers shared by the benchmark scripts: side-by-side timing and atomic merging of results.json."""

import datetime
import json
import os
import platform
import tempfile
import time

import keras
import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json")


def alternating(fns, repeats=7, number=1, spread=False):
    """Times each callable in `fns` (dict name -> fn) round-robin, `repeats` rounds of `number` calls.

    Alternating the candidates inside one run makes their ratio robust to a noisy machine.
    Returns dict name -> median seconds per call; with `spread=True`, also dict name -> max / min time
    over the rounds.
    """
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - start) / number)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    if spread:
        return medians, {name: float(max(t) / min(t)) for name, t in times.items()}
    return medians


def machine():
    return f"{platform.machine()} {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def merge(sections, backend=None):
    """Merges {section: values} under results[backend] in benchmarks/results.json, atomically."""
    backend = backend or keras.backend.backend()
    results = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            results = json.load(f)
    results["machine"] = machine()
    results["date"] = datetime.date.today().isoformat()
    results.setdefault(backend, {}).update(sections)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(RESULTS), suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    os.replace(tmp, RESULTS)
    print(json.dumps({backend: sections}, indent=2))
    return results
