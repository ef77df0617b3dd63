"""`make bench`: runs every benchmark module for the current KERAS_BACKEND and merges results.json."""

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import merge  # noqa: E402

MODULES = [
    "bench_engine",
    "bench_norms",
    "bench_attacks",
    "bench_min_norm",
    "bench_evaluation",
    "bench_training",
    "bench_device",
    "bench_processes",
    "bench_smoothing",
    "bench_torch_module",
    "bench_certify",
    "bench_malt",
    "bench_optimality",
    "bench_memory",
]

if __name__ == "__main__":
    only = sys.argv[1:]
    for name in MODULES:
        if only and name not in only:
            continue
        module = importlib.import_module(name)
        merge(module.run())
