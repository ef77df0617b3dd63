"""JAX's data parallelism and process groups: the batch under the active `keras.distribution`, and
`jax.distributed` (see `common/processes.py` for the interface)."""

import json
import os
import socket

import jax
import keras
import numpy as np

from gradkit import _io
from gradkit.backend.common.processes import JAX_ENV, pin


def batch_multiple():
    """Rows per batch must be a multiple of this: the data-parallel device count, else 1."""
    dist = keras.distribution.distribution()
    if dist is None:
        return 1
    layout = dist.get_data_layout((1,))
    mesh = layout.device_mesh
    axis = mesh.axis_names.index(dist.batch_dim_name)
    return int(mesh.shape[axis])


def distribute_batch(structure):
    """Shards every leaf along its batch axis under the active `keras.distribution`, else no-op."""
    dist = keras.distribution.distribution()
    if dist is None:
        return structure
    return keras.tree.map_structure(
        lambda t: keras.distribution.distribute_tensor(t, dist.get_data_layout(tuple(t.shape))), structure
    )


def start_processes():
    """Joins the `jax.distributed` group that `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and
    `JAX_PROCESS_ID` describe, when none runs yet (CPU collectives through gloo); call it before anything
    runs on a device (before a model is built or loaded). Returns `processes()`."""
    if all(k in os.environ for k in JAX_ENV):
        if not jax.distributed.is_initialized() and int(os.environ["JAX_NUM_PROCESSES"]) > 1:
            if _local_cpu():
                pin(int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"]))
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(
                os.environ["JAX_COORDINATOR_ADDRESS"],
                int(os.environ["JAX_NUM_PROCESSES"]),
                int(os.environ["JAX_PROCESS_ID"]),
            )
    return processes()


def _local_cpu():
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


def processes():
    """`(rank, size)` of the running process group, or None when this is the only process."""
    size = jax.process_count()
    return (jax.process_index(), size) if size > 1 else None


def mesh_spans_processes():
    """True when a `keras.distribution` is active whose device mesh includes another process's devices
    (under `jax.distributed`); False otherwise (no distribution, one process)."""
    dist = keras.distribution.distribution()
    if dist is None or processes() is None:
        return False
    local = {f"{d.platform}:{d.id}" for d in jax.local_devices()}
    return any(str(name) not in local for name in np.ravel(dist.device_mesh.devices))


def key_value():
    """None: gradkit does not reach the store of a JAX group."""
    return None


def _gather(array):
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=False))


def all_gather(obj):
    """`[obj of rank 0, obj of rank 1, ...]` on every process (as JSON, through the devices); `[obj]`
    without a group."""
    group = processes()
    if group is None:
        return [obj]
    data = np.frombuffer(_io.to_json(obj).encode(), np.uint8)
    sizes = _gather(np.array([len(data)], np.int64)).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: len(data)] = data
    rows = _gather(padded)
    return [json.loads(rows[i, : int(n)].tobytes()) for i, n in enumerate(sizes)]
