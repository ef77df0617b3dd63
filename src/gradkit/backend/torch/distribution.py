"""PyTorch's data parallelism and process groups: no `keras.distribution`, and `torch.distributed` under
`torchrun` (see `common/processes.py` for the interface)."""

import os

import torch
import torch.distributed as dist

from gradkit.backend.common import no_distribution
from gradkit.backend.common.processes import pin

batch_multiple = no_distribution.batch_multiple
distribute_batch = no_distribution.distribute_batch


def _started():
    return dist.is_available() and dist.is_initialized()


def start_processes():
    """Joins the `torch.distributed` group that `torchrun` describes (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
    `MASTER_PORT`; gloo on CPU, NCCL on GPU), when none runs yet; returns `processes()`."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and not _started():
        if not torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
            pin(int(os.environ["LOCAL_RANK"]), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return processes()


def processes():
    """`(rank, size)` of the running process group, or None when this is the only process."""
    if _started():
        size = dist.get_world_size()
        return (dist.get_rank(), size) if size > 1 else None
    return None


def mesh_spans_processes():
    """False: no `keras.distribution` mesh on PyTorch."""
    return False


class _KeyValue:
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
    """The running group's key-value store (`add`, `set`, `get`, `has`: the one its processes met
    through), or None without a group."""
    if processes() is None:
        return None
    from torch.distributed import distributed_c10d

    return _KeyValue(distributed_c10d._get_default_store())


def all_gather(obj):
    """`[obj of rank 0, obj of rank 1, ...]` on every process; `[obj]` without a group."""
    group = processes()
    if group is None:
        return [obj]
    out = [None] * group[1]
    dist.all_gather_object(out, obj)
    return out
