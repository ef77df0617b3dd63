"""The per-sample state of an evaluation, and its resumable copy on disk.

On disk (`state_path=`): a JSON file at `state_path` (the evaluation's fingerprint, the finished attacks,
their records and costs, the blocks each attack has finished) and, next to it, `<stem>.<k>.npz` after `k`
finished attacks (the robust mask, `broken_by`, `x_adv`, the zero-gradient mask of every point) and one
small `<stem>.<k>.<j>.npz` per block the running attack has finished since (that block's rows only).
Each is written atomically (`gradkit._io`): first the new npz, then the JSON naming it with its SHA-256,
then the npz files it no longer names are removed, so a crash at any point leaves a JSON whose npz files
exist and match.
"""

import contextlib
import dataclasses
import glob
import hashlib
import os
import re

import keras
import numpy as np

from gradkit import _checks, _io, backend
from gradkit.errors import StateMismatchError
from gradkit.gradients import as_ensemble

FORMAT = "gradkit.evaluation/2"  # 2: the fingerprint holds the model's weights


@dataclasses.dataclass
class State:
    """Where an evaluation stands.

    Attributes:
        robust: bool `(n,)`, still correctly classified under every attack run so far.
        broken_by: `n` strings or None: "clean", or the name of the attack that broke the point.
        x_adv: float `(n, ...)`: the breaking example, else the last one tried (x before any attack).
        zero_gradient: bool `(n,)`: an attack saw an input gradient of exactly zero there.
        finished: names of the finished attacks, in order; per_attack: their records (and the running
            attack's counts so far).
        blocks: attack name -> the numbers of the blocks it has finished (`_entry_run.run_entry`).
        from_probabilities: names of attacks that read log-probabilities as logits.
        randomized: max |difference| of two predictions of the same points (0.0 when deterministic).
        unconfirmed: successes an attack reported that the model's decision rule did not confirm.
    """

    robust: np.ndarray
    broken_by: list
    x_adv: np.ndarray
    zero_gradient: np.ndarray
    clean_accuracy: float
    randomized: float
    n_forwards: int = 0
    n_gradients: int = 0
    seconds: float = 0.0
    unconfirmed: int = 0
    finished: list = dataclasses.field(default_factory=list)
    per_attack: dict = dataclasses.field(default_factory=dict)
    from_probabilities: list = dataclasses.field(default_factory=list)
    certified: np.ndarray | None = None  # bool (n,): certified at eps (`certify=`), after the cascade
    blocks: dict = dataclasses.field(default_factory=dict)


def carry(state):
    """The start of the next eps: the points and breaks of `state`, no attack run yet."""
    points = (state.robust.copy(), list(state.broken_by), state.x_adv.copy(), state.zero_gradient.copy())
    return State(*points, state.clean_accuracy, state.randomized)


def digest(a):
    """SHA-256 of an array's bytes, with its dtype and shape: "hex:dtype:shape"."""
    a = np.ascontiguousarray(a)
    return hashlib.sha256(a.tobytes()).hexdigest() + f":{a.dtype.str}:{a.shape}"


def model_digest(model):
    """SHA-256 of a model's members (class, every variable's value, dtype and shape, in order; not their
    names) and of the ensemble weights: another model, or the same one trained further, has another
    digest."""
    ensemble, h = as_ensemble(model), hashlib.sha256()
    read = backend.to_numpy if backend.mesh_spans_processes() else keras.ops.convert_to_numpy
    for member in ensemble.models:
        h.update(type(member).__qualname__.encode())
        for variable in member.weights:
            value = np.ascontiguousarray(read(variable))
            h.update(f"{value.dtype.str}:{value.shape}".encode())
            h.update(value.tobytes())
    h.update(np.asarray(ensemble.weights, np.float64).tobytes())
    return h.hexdigest()


def fingerprint(model, x, labels, config):
    """The JSON-able identity of an evaluation: the model's and the data's digests and every argument
    that changes its result."""
    names = [e.name if e.fn is None else f"{e.fn.__module__}.{e.fn.__qualname__}" for e in config.entries]
    return {
        "format": FORMAT,
        "model": model_digest(model),
        "x": digest(x),
        "y": digest(labels),
        "eps": config.eps,
        "norm": _checks.norm_name(config.norm),
        "attacks": names,
        "seed": config.seed,
        "steps": config.steps,
        "n_queries": config.n_queries,
        "clip_values": None if config.clip_values is None else list(config.clip_values),
        **_version_fingerprint(config),
        **({} if config.box is None else {"box": [digest(b) for b in config.box]}),
        **({} if config.mask is None else {"mask": digest(config.mask)}),
        **({} if config.budget is None else {"budget": digest(config.budget)}),
    }


def _version_fingerprint(config):
    """The version and what changes the gradients of its attacks: the EOT draws ("rand") and the
    surrogate (BPDA: its weights' digest, or a callable's qualified name)."""
    out = {"version": config.version}
    if config.version == "rand":
        out["eot_iter"] = config.eot_iter
    if config.check_convergence:  # only when set: the fingerprints of other evaluations stay as they were
        out["check_convergence"] = True
    if config.surrogate is not None:
        s = config.surrogate
        name = f"{getattr(s, '__module__', '')}.{getattr(s, '__qualname__', type(s).__qualname__)}"
        out["surrogate"] = model_digest(s) if isinstance(s, keras.Model) else name
    return out


def check_path(state_path):
    """`state_path` as a str, or None; TypeError for a non-path, ValueError for a folder."""
    if state_path is None:
        return None
    if not isinstance(state_path, (str, os.PathLike)):
        _checks.fail("state_path", "None or a file path", state_path, TypeError)
    state_path = os.fspath(state_path)
    if os.path.isdir(state_path):
        _checks.fail("state_path", "a file path, not a folder", state_path)
    return state_path


_DIGESTS = {"model", "x", "y", "surrogate"}


def changes(old, new):
    """The keys whose values differ between fingerprints `old` (a file's) and `new`, and a phrase each."""
    old = old if isinstance(old, dict) else {}
    keys = [k for k in {**old, **new} if old.get(k) != new.get(k)]
    said = [
        f"{k} (other values)" if k in _DIGESTS else f"{k} ({old.get(k)!r} in the file, {new.get(k)!r} now)"
        for k in keys
    ]
    return keys, said


def _other(state_path, why, changed=()):
    expected = (
        "a new file or the state of this same evaluation (same model and weights, x, y, eps, norm, attacks, "
        f"seed, steps, n_queries, clip_values); it holds {why}. To start afresh, pass another state_path "
        "or delete it and the .npz files beside it"
    )
    _checks.fail(
        "state_path", expected, state_path, lambda m: StateMismatchError(m, state_path, why, list(changed))
    )


def _checked(folder, state_path, name, sha):
    npz = os.path.join(folder, name)
    if not os.path.isfile(npz) or _io.sha256(npz) != sha:
        _other(state_path, f"arrays {npz} that are missing or altered")
    return npz


def load(state_path, fp):
    """The `State` saved at `state_path` for fingerprint `fp`, or None when there is no file.

    Raises:
        StateMismatchError (a ValueError): the file holds another evaluation (its `changed` names the
            differences), is unreadable, or one of its npz files is missing or altered.
    """
    try:
        meta = _io.read_json(state_path)
    except (OSError, ValueError) as error:
        _other(state_path, f"an unreadable file ({error})")
    if meta is None:
        return None
    if not isinstance(meta, dict) or meta.get("fingerprint") != fp:
        keys, said = changes(meta.get("fingerprint") if isinstance(meta, dict) else None, fp)
        _other(state_path, "another evaluation: " + ", ".join(said), keys)
    folder = os.path.dirname(os.path.abspath(state_path))
    with np.load(_checked(folder, state_path, meta["arrays"], meta["sha256"]), allow_pickle=False) as arrays:
        state = State(
            arrays["robust"].copy(),
            [str(b) or None for b in arrays["broken_by"]],
            arrays["x_adv"].copy(),
            arrays["zero_gradient"].copy(),
            **meta["state"],
        )
    for delta in meta.get("deltas", []):
        with np.load(_checked(folder, state_path, delta["arrays"], delta["sha256"]), allow_pickle=False) as a:
            rows = a["rows"]
            state.robust[rows], state.x_adv[rows], state.zero_gradient[rows] = (
                a["robust"],
                a["x_adv"],
                a["zero_gradient"],
            )
            for i, b in zip(rows.tolist(), a["broken_by"]):
                state.broken_by[i] = str(b) or None
    return state


def progress(state, names, block, first_block=0):
    """What `state` holds of the attacks `names` over points in blocks of `block` rows (the first numbered
    `first_block`), in words: "apgd-ce done (4 blocks), apgd-t 2 of 4 blocks"."""
    said = []
    for name in names:
        done = set(state.blocks.get(name, ()))
        if name in state.finished:
            n = len(done)
            said.append(f"{name} done" + (f" ({n} block{'s' * (n != 1)})" if name in state.blocks else ""))
        elif done:
            left = {first_block + int(j) for j in np.flatnonzero(state.robust) // block}
            said.append(f"{name} {len(done)} of {len(done | left)} blocks")
    return ", ".join(said) or "no attack yet"


def _stem(state_path):
    """The state file's path less ".json": its npz files' prefix (each rank's `<path>.rank<r>` its own)."""
    path = os.path.abspath(state_path)
    return path[: -len(".json")] if path.endswith(".json") else path


def _numbered(stem):
    """The npz files `<stem>.<k>.npz` and `<stem>.<k>.<j>.npz` beside a state file."""
    pattern = re.compile(re.escape(os.path.basename(stem)) + r"\.\d+(\.\d+)?\.npz")
    return [p for p in glob.glob(glob.escape(stem) + ".*.npz") if pattern.fullmatch(os.path.basename(p))]


def _write_npz(path, state, rows=None):
    rows = slice(None) if rows is None else rows
    arrays = {
        "robust": state.robust[rows],
        "broken_by": np.array([b or "" for b in np.asarray(state.broken_by, object)[rows]], dtype=str),
        "x_adv": state.x_adv[rows],
        "zero_gradient": state.zero_gradient[rows],
    }
    if not isinstance(rows, slice):
        arrays["rows"] = np.asarray(rows, np.int64)

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    _io.write_atomic(path, write)
    return {"arrays": os.path.basename(path), "sha256": _io.sha256(path)}


def _fields(state):
    skip = {"robust", "broken_by", "x_adv", "zero_gradient", "certified"}  # certified: recomputed
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in skip}


def _read_meta(state_path):
    try:
        return _io.read_json(state_path)
    except (OSError, ValueError):
        return None


def save(state_path, fp, state):
    """Writes all of `state` atomically (npz, then the JSON naming it), then drops the npz files it
    replaced."""
    folder = os.path.dirname(os.path.abspath(state_path))
    os.makedirs(folder, exist_ok=True)
    stem, k = _stem(state_path), len(state.finished)
    old = _read_meta(state_path)
    named = old.get("arrays") if isinstance(old, dict) else None
    npz = f"{stem}.{k}.npz" if named != os.path.basename(f"{stem}.{k}.npz") else f"{stem}.{k}.0.npz"
    meta = {"fingerprint": fp, **_write_npz(npz, state), "deltas": [], "state": _fields(state)}
    _io.write_json(meta, state_path)
    for other in _numbered(stem):
        if other != npz:
            with contextlib.suppress(FileNotFoundError):
                os.remove(other)
    _io.fsync_dir(folder)


def save_block(state_path, fp, state, rows):
    """Saves `state` after a block of the running attack changed its `rows` (int indices): one small npz
    of those rows, then the JSON naming it (a full `save` when the file holds none of this state yet)."""
    meta = _read_meta(state_path)
    if not isinstance(meta, dict) or meta.get("fingerprint") != fp:
        return save(state_path, fp, state)
    stem, deltas = _stem(state_path), meta.get("deltas", [])
    delta = _write_npz(f"{stem}.{len(state.finished)}.{len(deltas) + 1}.npz", state, rows)
    _io.write_json({**meta, "deltas": [*deltas, delta], "state": _fields(state)}, state_path)
    _io.fsync_dir(os.path.dirname(os.path.abspath(state_path)))
