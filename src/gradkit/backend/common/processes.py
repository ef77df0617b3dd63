"""What the process groups of PyTorch and JAX share (each backend's `distribution.py` holds its own).

The interface, on every backend:

- `start_processes()`: joins the group a launcher describes in the environment, when none runs yet:
  PyTorch under `torchrun` (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; gloo on CPU, NCCL on
  GPU), JAX with `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (CPU collectives
  through gloo). Without those variables it does nothing. TensorFlow has no process group here: it
  refuses a launcher.
- `processes()`: `(rank, size)` of the running group, or None for a single process.
- `all_gather(obj)`: every process's JSON-able `obj`, in rank order, on every process.
- `mesh_spans_processes()`: whether the active `keras.distribution` mesh holds other processes' devices
  (JAX): then every process runs the same calls on the same data, each feeding its own devices' rows.
- `key_value()`: the group's key-value store (PyTorch: the one its processes met through), or None.

Several processes on one CPU-only host each get their own share of the cores (`pin`, with
`os.sched_setaffinity`, as `mpirun` binds ranks and as JAX's maintainers advise for limiting its CPU
threads, jax#1539): JAX sizes its thread pool from the affinity, and two processes whose pools both span
every core spin against each other. `GRADKIT_CPU_AFFINITY=0` turns this off; a launcher's own binding (a
narrower affinity than the host's cores) is kept.
"""

import os

import numpy as np

JAX_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def pin(local_rank, local_size):
    """Restricts this process to its contiguous share of the cores this process may use, when
    `local_size` processes share them (see the module docstring).

    Args:
        local_rank: this process's index among the processes of its host.
        local_size: the number of processes of its host.
    """
    if not hasattr(os, "sched_setaffinity") or os.environ.get("GRADKIT_CPU_AFFINITY", "1") == "0":
        return
    cores = sorted(os.sched_getaffinity(0))
    if local_size < 2 or len(cores) < local_size or len(cores) < (os.cpu_count() or 0):
        return  # one process, too few cores, or a launcher already bound this one
    share = np.array_split(np.array(cores), local_size)[local_rank]
    os.sched_setaffinity(0, {int(c) for c in share})
