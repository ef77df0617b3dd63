"""TensorFlow's data parallelism and process groups: neither (one device, one process; see
`common/processes.py` for the interface)."""

import os

from gradkit.backend.common import no_distribution

batch_multiple = no_distribution.batch_multiple
distribute_batch = no_distribution.distribute_batch


def start_processes():
    """Refuses a launcher (TensorFlow has no process group here); returns `processes()`, None.

    Raises:
        ValueError: a launcher's variables (`RANK`, `JAX_NUM_PROCESSES`) are set.
    """
    if "RANK" in os.environ or "JAX_NUM_PROCESSES" in os.environ:
        raise ValueError(
            "Several processes need the torch or jax backend (torch.distributed, jax.distributed). "
            "Received: KERAS_BACKEND=tensorflow under a launcher"
        )
    return processes()


def processes():
    """None: TensorFlow runs one process here."""
    return None


def all_gather(obj):
    """`[obj]` (one process)."""
    return [obj]


def mesh_spans_processes():
    """False: no `keras.distribution` mesh on TensorFlow."""
    return False


def key_value():
    """None: no process group, so no key-value store."""
    return None
