"""`evaluate_processes`: one evaluation across the processes of a torch.distributed or jax.distributed group.

Each process evaluates its contiguous shard of whole blocks and the per-sample records are gathered
and merged on every process, so the result equals the one-process result point for point.
"""

import os

import numpy as np

from gradkit import backend
from gradkit.evaluation import _shards, _state, _tasks
from gradkit.evaluation._merge import merge_shards, shard_from_dict, shard_to_dict


def _check_agree(settings, rank):
    """ValueError naming the ranks and settings that differ from rank 0's."""
    everyone = backend.all_gather(settings)
    for other, theirs in enumerate(everyone):
        differ = [k for k in sorted(set(everyone[0]) | set(theirs)) if everyone[0].get(k) != theirs.get(k)]
        if differ:
            raise ValueError(
                f"The processes must evaluate the same model, data and settings: rank {other} differs from "
                f"rank 0 in {', '.join(differ)} (this is rank {rank})"
            )


def evaluate_processes(model, x, y, *, epsilons, state_path=None, **options):
    """`evaluate_shard` over all points, split across the running process group.

    Each process loads the whole data, evaluates its contiguous shard of whole blocks (`shard_rows` with
    its rank), and the per-sample records are gathered on every process (`gradkit.backend.all_gather`)
    and merged (`merge_shards`). Under a `keras.distribution` mesh over every process's devices (JAX,
    `backend.mesh_spans_processes()`) the processes instead run the whole evaluation together: every
    compiled call's batch is split over the mesh, each process feeding its own devices' rows, and the
    results are gathered at every read. Before any attack the processes compare what they were given
    (model weights, data, settings): a process group whose ranks disagree is refused on every rank.

    Args:
        model, x, y, epsilons, options: as for `evaluate_shard` (every process passes the same).
        state_path: None or a JSON path; each rank saves its state to and resumes from
            `<path>.rank<r>` when in a group (a rerun after an interruption runs each rank's own
            blocks, without sharing the tail).
            Under a mesh spanning the processes, create or load `model` after `set_distribution`
            (its variables must live on the mesh).

    Returns:
        `(shard, rank, size)`: the merged `Shard` over all points (the same on every process), this
        process's rank and the group size (`(shard, 0, 1)` without a group).

    Raises:
        ValueError, TypeError: as `evaluate_shard`, on every rank; or ranks that disagree on the model,
            the data or the settings; before any attack.
    """
    group = backend.processes()
    if group is None:
        return _shards.evaluate_shard(model, x, y, epsilons=epsilons, state_path=state_path, **options), 0, 1
    rank, size = group
    given = {k: repr(v) for k, v in sorted(options.items()) if k != "verbose"}
    given.update(epsilons=repr(epsilons), model=_state.model_digest(model))
    given.update(
        x=_state.digest(np.asarray(x)), y=_state.digest(np.asarray(y)), resume=repr(bool(state_path))
    )
    _check_agree(given, rank)  # before any check that could fail on one rank only
    path = None if state_path is None else f"{state_path}.rank{rank}"
    options = {**options, "verbose": options.get("verbose", 1) if rank == 0 else 0}
    if backend.mesh_spans_processes():  # one run over the mesh: every process holds the whole result
        return _shards.evaluate_shard(model, x, y, epsilons=epsilons, state_path=path, **options), rank, size
    block = options.get("batch_size") or len(x)
    rows = _shards.shard_rows(len(x), rank, size, block, name="processes")
    count = 1 if np.ndim(epsilons) == 0 else len(list(epsilons))
    saved = path is not None and any(
        os.path.exists(_shards._state_path(path, i, count)) for i in range(count)
    )
    resuming = any(backend.all_gather(saved))
    tasks = None if resuming else _tasks.start(len(x), block)  # resuming: each rank its own blocks
    mine = _shards.evaluate_shard(
        model, x, y, epsilons=epsilons, rows=rows, state_path=path, tasks=tasks, **options
    )
    parts = [shard_from_dict(record) for record in backend.all_gather(shard_to_dict(mine))]
    return merge_shards(parts, names=[f"rank {r}" for r in range(size)]), rank, size
