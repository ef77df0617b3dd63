"""Process groups: the only code that calls `torch.distributed` and `jax.distributed`.

- `start_processes()`: joins the group a launcher describes in the environment, when none runs yet:
  PyTorch under `torchrun` (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; gloo on CPU, NCCL on
  GPU), JAX with `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (CPU collectives
  through gloo). Without those variables it does nothing.
- `processes()`: `(rank, size)` of the running group, or None for a single process.
- `all_gather(obj)`: every process's JSON-able `obj`, in rank order, on every process.
- `mesh_spans_processes()`: whether the active `keras.distribution` mesh holds other processes' devices
  (JAX): then every process runs the same calls on the same data, each feeding its own devices' rows.
- `key_value()`: the group's key-value store (PyTorch: the one its processes met through), or None.

Several processes on one CPU-only host each get their own share of the cores (`os.sched_setaffinity`,
as `mpirun` binds ranks and as JAX's maintainers advise for limiting its CPU threads, jax#1539): JAX
sizes its thread pool from the affinity, and two processes whose pools both span every core spin
against each other. `GRADKIT_CPU_AFFINITY=0` turns this off; a launcher's own binding (a narrower
affinity than the host's cores) is kept.

TensorFlow has no process group here: `processes()` is None and `start_processes()` refuses a launcher.
"""

import json
import os
import socket

import keras
import numpy as np

from gradkit import _io

_JAX_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def _torch_started():
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def start_processes():
    """Joins the launcher's process group (see the module docstring); returns `processes()`. On JAX call
    it before anything runs on a device (before a model is built or loaded).

    Raises:
        ValueError: a launcher's variables under a backend that has no process group here.
    """
    backend = keras.backend.backend()
    if backend == "torch" and "RANK" in os.environ and "WORLD_SIZE" in os.environ and not _torch_started():
        import torch
        import torch.distributed as dist

        if not torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
            _pin(int(os.environ["LOCAL_RANK"]), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    elif backend == "jax" and all(k in os.environ for k in _JAX_ENV):
        import jax

        if not jax.distributed.is_initialized() and int(os.environ["JAX_NUM_PROCESSES"]) > 1:
            if _jax_local_cpu():
                _pin(int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"]))
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(
                os.environ["JAX_COORDINATOR_ADDRESS"],
                int(os.environ["JAX_NUM_PROCESSES"]),
                int(os.environ["JAX_PROCESS_ID"]),
            )
    elif backend == "tensorflow" and ("RANK" in os.environ or "JAX_NUM_PROCESSES" in os.environ):
        raise ValueError(
            "Several processes need the torch or jax backend (torch.distributed, jax.distributed). "
            "Received: KERAS_BACKEND=tensorflow under a launcher"
        )
    return processes()


def _jax_local_cpu():
    """Every process of the JAX group on this host (the coordinator is this host) and JAX on its CPU
    (`JAX_PLATFORMS=cpu`, or no accelerator plugin installed); known before JAX starts a backend."""
    host = os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[0].strip("[]")
    if host not in ("localhost", "127.0.0.1", "::1", socket.gethostname()):
        return False
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms == "cpu"
    from importlib.metadata import entry_points

    return not list(entry_points(group="jax_plugins"))


def _pin(local_rank, local_size):
    """Restricts this process to its contiguous share of the cores this process may use, when
    `local_size` processes share them (see the module docstring)."""
    if not hasattr(os, "sched_setaffinity") or os.environ.get("GRADKIT_CPU_AFFINITY", "1") == "0":
        return
    cores = sorted(os.sched_getaffinity(0))
    if local_size < 2 or len(cores) < local_size or len(cores) < (os.cpu_count() or 0):
        return  # one process, too few cores, or a launcher already bound this one
    share = np.array_split(np.array(cores), local_size)[local_rank]
    os.sched_setaffinity(0, {int(c) for c in share})


def processes():
    """`(rank, size)` of the running process group, or None when this is the only process."""
    backend = keras.backend.backend()
    if backend == "torch" and _torch_started():
        import torch.distributed as dist

        size = dist.get_world_size()
        return (dist.get_rank(), size) if size > 1 else None
    if backend == "jax":
        import jax

        size = jax.process_count()
        return (jax.process_index(), size) if size > 1 else None
    return None


def mesh_spans_processes():
    """True when a `keras.distribution` is active whose device mesh includes another process's devices
    (JAX under `jax.distributed`); False otherwise (no distribution, one process, other backends)."""
    dist = keras.distribution.distribution()
    if dist is None or keras.backend.backend() != "jax" or processes() is None:
        return False
    import jax

    local = {f"{d.platform}:{d.id}" for d in jax.local_devices()}
    return any(str(name) not in local for name in np.ravel(dist.device_mesh.devices))


class _TorchKeyValue:
    """The keys of a torch.distributed store: `add` (atomic, returns the new count), `set`, `get` (waits for
    the key), `has`."""

    def __init__(self, store):
        self._store = store

    def add(self, key, amount=1):
        return int(self._store.add(key, amount))

    def set(self, key, value):
        self._store.set(key, value)

    def get(self, key):
        return bytes(self._store.get(key))

    def has(self, key):
        return bool(self._store.check([key]))


def key_value():
    """The running group's key-value store (`add`, `set`, `get`, `has`), or None: no group, or JAX (whose
    store gradkit does not reach)."""
    if keras.backend.backend() != "torch" or processes() is None:
        return None
    from torch.distributed import distributed_c10d

    return _TorchKeyValue(distributed_c10d._get_default_store())


def _jax_gather(array):
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=False))


def all_gather(obj):
    """`[obj of rank 0, obj of rank 1, ...]` on every process; `[obj]` without a group."""
    group = processes()
    if group is None:
        return [obj]
    if keras.backend.backend() == "torch":
        import torch.distributed as dist

        out = [None] * group[1]
        dist.all_gather_object(out, obj)
        return out
    data = np.frombuffer(_io.to_json(obj).encode(), np.uint8)
    sizes = _jax_gather(np.array([len(data)], np.int64)).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: len(data)] = data
    rows = _jax_gather(padded)
    return [json.loads(rows[i, : int(n)].tobytes()) for i, n in enumerate(sizes)]
