"""The per-sample state of an evaluation, and its resumable copy on disk.

On disk (`state_path=`): a JSON file at `state_path` (the evaluation's fingerprint, the finished attacks,
their records and costs) and, next to it, `<stem>.<k>.npz` after `k` finished attacks (the robust mask,
`broken_by`, `x_adv`, the zero-gradient mask). Each is written atomically (`gradkit._io`): first the new
npz, then the JSON naming it with its SHA-256, then the old npz is removed, so a crash at any point
leaves a JSON whose npz exists and matches.
"""

import dataclasses
import glob
import hashlib
import os

import keras
import numpy as np

from gradkit import _checks, _io, backend
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
        finished: names of the finished attacks, in order; per_attack: their records.
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
    }


def _version_fingerprint(config):
    """The version and what changes the gradients of its attacks: the EOT draws ("rand") and the
    surrogate (BPDA: its weights' digest, or a callable's qualified name)."""
    out = {"version": config.version}
    if config.version == "rand":
        out["eot_iter"] = config.eot_iter
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


def _other(state_path, why):
    expected = (
        "a new file or the state of this same evaluation (same model and weights, x, y, eps, norm, attacks, "
        f"seed, steps, n_queries, clip_values); {why}"
    )
    _checks.fail("state_path", expected, state_path)


def load(state_path, fp):
    """The `State` saved at `state_path` for fingerprint `fp`, or None when there is no file.

    Raises:
        ValueError: the file holds another evaluation, is unreadable, or its npz is missing or altered.
    """
    try:
        meta = _io.read_json(state_path)
    except (OSError, ValueError) as error:
        _other(state_path, f"it is unreadable ({error})")
    if meta is None:
        return None
    if not isinstance(meta, dict) or meta.get("fingerprint") != fp:
        _other(state_path, "it holds another evaluation")
    npz = os.path.join(os.path.dirname(os.path.abspath(state_path)), meta["arrays"])
    if not os.path.isfile(npz) or _io.sha256(npz) != meta["sha256"]:
        _other(state_path, f"its arrays {npz} are missing or altered: remove both files to start over")
    with np.load(npz, allow_pickle=False) as arrays:
        broken = [str(b) or None for b in arrays["broken_by"]]
        return State(
            arrays["robust"].copy(),
            broken,
            arrays["x_adv"].copy(),
            arrays["zero_gradient"].copy(),
            **meta["state"],
        )


def _arrays_path(state_path, k):
    return f"{os.path.splitext(os.path.abspath(state_path))[0]}.{k}.npz"


def save(state_path, fp, state):
    """Writes `state` atomically (npz, then the JSON naming it), then drops the npz files it replaced."""
    folder = os.path.dirname(os.path.abspath(state_path))
    os.makedirs(folder, exist_ok=True)
    npz = _arrays_path(state_path, len(state.finished))
    broken = np.array([b or "" for b in state.broken_by], dtype=str)

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(
                f, robust=state.robust, broken_by=broken, x_adv=state.x_adv, zero_gradient=state.zero_gradient
            )

    _io.write_atomic(npz, write)
    skip = {"robust", "broken_by", "x_adv", "zero_gradient"}
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in skip}
    meta = {"fingerprint": fp, "arrays": os.path.basename(npz), "sha256": _io.sha256(npz), "state": fields}
    _io.write_json(meta, state_path)
    stem = os.path.splitext(os.path.abspath(state_path))[0]
    for old in glob.glob(glob.escape(stem) + ".*.npz"):
        if old != npz and old[len(stem) + 1 : -4].isdigit():
            os.remove(old)
    _io.fsync_dir(folder)
