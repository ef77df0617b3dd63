"""The resumable state of an evaluation of a stream (`_streaming`): one record per finished block.

On disk (`state_path=`): a JSON file (the evaluation's fingerprint, and per finished block its data's
digest, its costs and per-attack counts, and the npz holding its per-point arrays) and beside it one
`<stem>.block<j>.npz` per block (robust, broken_by, zero_gradient, and certified/shares when computed).
Each npz is written before the JSON that names it with its SHA-256 (`gradkit._io`, atomically), so an
interrupted run leaves a JSON whose files exist and match; a rerun reads the stream again, checks each
finished block's data against its digest and attacks only the blocks after them.
"""

import hashlib
import os

import numpy as np

from gradkit import _io
from gradkit.evaluation import _state
from gradkit.evaluation._convergence import TRACE
from gradkit.evaluation._state import State

FORMAT = "gradkit.evaluation.stream/1"
COUNTS = ("n_points", "n_broken", "n_forwards", "n_gradients", "seconds")  # summed over the blocks


def fingerprint(model, x, config, epsilons, by_prediction):
    """`_state.fingerprint` of a stream (`x`: its first rows, for the shapes): the data's digest replaced
    by the block size (each block's data is checked against its own digest on resume), with every eps
    and how the clean points are judged."""
    fp = _state.fingerprint(model, x[:0], np.zeros(0, np.int64), config)
    del fp["x"], fp["y"], fp["eps"]
    return {
        **fp,
        "format": FORMAT,
        "block": config.batch_size,
        "epsilons": list(epsilons),
        "by_prediction": by_prediction,
    }


def block_digest(x, labels):
    """The digest of one block's points (its `x` and labels)."""
    parts = [np.ascontiguousarray(a) for a in (x, labels)]  # `_state.digest`, from the buffers
    return "|".join(hashlib.sha256(a).hexdigest() + f":{a.dtype.str}:{a.shape}" for a in parts)


def load(state_path, fp):
    """The block records saved at `state_path` for fingerprint `fp` ([] when there is no file).

    Raises:
        StateMismatchError: the file holds another evaluation, or is unreadable.
    """
    try:
        meta = _io.read_json(state_path)
    except (OSError, ValueError) as error:
        _state._other(state_path, f"an unreadable file ({error})")
    if meta is None:
        return []
    if not isinstance(meta, dict) or meta.get("fingerprint") != fp:
        keys, said = _state.changes(meta.get("fingerprint") if isinstance(meta, dict) else None, fp)
        _state._other(state_path, "another evaluation: " + ", ".join(said), keys)
    return list(meta["blocks"])


def arrays(state_path, record, j, digest):
    """The per-point arrays of finished block `j` (a dict of numpy arrays), after checking that the data
    read again has the digest saved with it and that its npz is intact."""
    if record["digest"] != digest:
        _state._other(state_path, f"another stream: the points of block {j} differ", ["x"])
    folder = os.path.dirname(os.path.abspath(state_path))
    with np.load(_state._checked(folder, state_path, record["arrays"], record["sha256"])) as loaded:
        out = {k: loaded[k] for k in loaded.files}
    for key in [k for k in out if k.startswith("broken_by")]:
        out[key] = [str(b) or None for b in out[key]]
    return out


def save_block(state_path, fp, records, j, digest, block, record):
    """Appends finished block `j` (its per-point arrays `block`, its costs `record`) to the file: its npz,
    then the JSON naming it. `records`: the blocks saved so far (extended in place)."""
    folder = os.path.dirname(os.path.abspath(state_path))
    os.makedirs(folder, exist_ok=True)
    path = f"{_state._stem(state_path)}.block{j}.npz"
    values = {k: v for k, v in block.items() if v is not None}
    for key in [k for k in values if k.startswith("broken_by")]:
        values[key] = np.array([b or "" for b in values[key]], dtype=str)

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **values)

    _io.write_atomic(path, write)
    records.append({"digest": digest, "arrays": os.path.basename(path), "sha256": _io.sha256(path), **record})
    _io.write_json({"fingerprint": fp, "blocks": records}, state_path)
    _io.fsync_dir(folder)


class Totals:
    """One eps's per-point arrays and summed costs over the blocks so far."""

    def __init__(self, names, i):
        self.names, self.i, self.parts = names, i, []
        self.per_attack = {n: {**dict.fromkeys(COUNTS, 0), "no_gradient": False} for n in names}
        self.counts, self.costs, self.from_probabilities = [0] * len(names), [0, 0, 0], set()

    def add(self, arrays, record):
        self.parts.append({k[: -len(f"_{self.i}")]: v for k, v in arrays.items() if k.endswith(f"_{self.i}")})
        for name, r in record["per_attack"].items():
            mine = self.per_attack[name]
            for key in COUNTS:
                mine[key] += r[key]
            mine["no_gradient"] = mine["no_gradient"] or r["no_gradient"]
            if TRACE in r:  # check_convergence: an ascent's loss tail, summed over the blocks
                mine[TRACE] = [a + b for a, b in zip(mine.get(TRACE, (0.0, 0.0, 0.0)), r[TRACE])]
        self.counts = [a + b for a, b in zip(self.counts, record["counts"])]
        self.costs = [a + b for a, b in zip(self.costs, record["costs"])]
        self.from_probabilities |= set(record["from_probabilities"])

    def joined(self, key):
        values = [p.get(key) for p in self.parts]
        return None if any(v is None for v in values) else values

    def state(self, randomized, probe, seconds):
        """The `State` of all points: the records of `run_entry`, summed over the blocks."""
        broken_by = [b for part in self.joined("broken_by") for b in part]
        n, per_attack = len(broken_by), {}
        for name, count in zip(self.names, self.counts):
            r = self.per_attack[name]
            per_attack[name] = {
                "accuracy": 1.0 - r["n_broken"] / r["n_points"] if r["n_points"] else None,
                "robust_accuracy": count / n,
                **{key: r[key] for key in (*COUNTS, TRACE) if key in r},
                "no_gradient": r["no_gradient"],
            }
        n_forwards, n_gradients, unconfirmed = self.costs
        certified = self.joined("certified")
        return State(
            robust=np.concatenate(self.joined("robust")),
            broken_by=broken_by,
            x_adv=None,
            zero_gradient=np.concatenate(self.joined("zero_gradient")),
            clean_accuracy=float(np.mean([b != "clean" for b in broken_by])),
            randomized=randomized,
            n_forwards=probe + n_forwards,
            n_gradients=n_gradients,
            seconds=seconds,
            unconfirmed=unconfirmed,
            finished=list(self.names),
            per_attack=per_attack,
            from_probabilities=[n for n in self.names if n in self.from_probabilities],
            certified=None if certified is None else np.concatenate(certified),
        )
