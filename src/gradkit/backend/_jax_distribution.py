"""JAX data parallelism: the batch under the active `keras.distribution` and arrays that span processes."""

import jax
import keras
import numpy as np


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


def to_numpy(tensor):
    """`keras.ops.convert_to_numpy(tensor)`; an array sharded over the devices of several processes (a
    `keras.distribution` mesh spanning a `jax.distributed` group) is gathered from all of them first:
    every process must then call it, in the same order."""
    if isinstance(tensor, keras.Variable):
        tensor = tensor.value
    if isinstance(tensor, jax.Array) and not tensor.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(tensor, tiled=True))
    return keras.ops.convert_to_numpy(tensor)
