"""`evaluate` on data that does not fit in memory (`_sources`): the whole cascade on one block of
`batch_size` points at a time, with the result of evaluating the concatenated arrays.

Block j holds the points `[j * batch_size, (j + 1) * batch_size)` and each attack call on it is seeded
with `seed + j`, as in memory; an attack on a block depends only on the block's points, the earlier
attacks on them and its seed, so running block by block instead of attack by attack changes no point's
outcome. Only the current block's points (and the few batches the re-blocking holds) are in memory,
with the per-point results (booleans and names) of every point.
"""

import dataclasses
import hashlib
import itertools
import time

import keras
import numpy as np
from tqdm.auto import tqdm

from gradkit import _checks
from gradkit.evaluation import _plan, _scale, _sources, _stream_state, _versions
from gradkit.evaluation._entry_run import fooled
from gradkit.evaluation._result import from_state
from gradkit.evaluation._state import State
from gradkit.gradients import as_ensemble, check_surrogate

_COUNTS = ("n_points", "n_broken", "n_forwards", "n_gradients", "seconds")


@dataclasses.dataclass(frozen=True)
class Suite:
    """What `_suite` lends the stream (it imports this module, so this one cannot import it): its
    `cascade`, `certified_of`, `shares_of`, `weights`, `randomness` (`_randomness`) and `probe` (the
    rows predicted twice to detect a randomized model)."""

    cascade: object
    certified_of: object
    shares_of: object
    weights: object
    randomness: object
    probe: int


def _ahead(blocks, rows):
    """`(held, rest)`: the first blocks until they hold `rows` points (or the stream ends), and the
    iterator of the blocks after them."""
    held = []
    for block in blocks:
        held.append(block)
        if sum(len(b[1]) for b in held) >= rows:
            break
    return held, blocks


def _configure(model, x0, y0, options):
    """`(config, surrogate)` checked on the first block, as `evaluate` checks arrays."""
    _versions.check_version(options["version"], options["attacks"], options["eot_iter"])
    x0, _, classes = _plan.check_data(model, x0, y0)
    options["surrogate"] = check_surrogate(options["surrogate"], model, x0)
    config = _plan.check_config(model, classes, **options, inputs=_scale.inputs(model, x0, classes))
    return config


def _run_block(suite, model, x, labels, j, config, randomized):
    """The per-point arrays and the costs of the whole cascade on block `j`."""
    state = State(np.zeros(len(x), bool), [], x.copy(), np.zeros(len(x), bool), 0.0, randomized)
    state.robust = ~fooled(model, x, labels, config, state)
    state.broken_by = [None if r else "clean" for r in state.robust]
    suite.cascade(model, x, labels, config, state, first_block=j)
    shares = suite.shares_of(model, x, labels, config)
    arrays = {
        "robust": state.robust,
        "broken_by": state.broken_by,
        "zero_gradient": state.zero_gradient,
        "certified": suite.certified_of(model, x, labels, config),
        "shares": None if shares is None else np.asarray(shares),
    }
    record = {
        "per_attack": {
            name: {**{k: r[k] for k in _COUNTS}, "no_gradient": r["no_gradient"]}
            for name, r in state.per_attack.items()
        },
        "costs": [state.n_forwards, state.n_gradients, state.unconfirmed],
        "from_probabilities": state.from_probabilities,
    }
    return arrays, record


class _Totals:
    """The per-point arrays and the summed costs of the blocks so far."""

    def __init__(self, names):
        self.names, self.parts, self.labels = names, [], []
        self.per_attack = {n: {**dict.fromkeys(_COUNTS, 0), "no_gradient": False} for n in names}
        self.costs, self.from_probabilities = [0, 0, 0], set()
        self.low, self.high = np.inf, -np.inf

    def add(self, x, labels, arrays, record):
        self.parts.append(arrays)
        self.labels.append(labels)
        self.low, self.high = min(self.low, float(np.min(x))), max(self.high, float(np.max(x)))
        self.shape, self.dtype = x.shape[1:], x.dtype
        for name, r in record["per_attack"].items():
            mine = self.per_attack[name]
            for key in _COUNTS:
                mine[key] += r[key]
            mine["no_gradient"] = mine["no_gradient"] or r["no_gradient"]
        self.costs = [a + b for a, b in zip(self.costs, record["costs"])]
        self.from_probabilities |= set(record["from_probabilities"])

    def joined(self, key):
        values = [p.get(key) for p in self.parts]
        return None if any(v is None for v in values) else values

    def state(self, randomized, probe, seconds):
        """The `State` of all points: the records of `run_entry`, summed over the blocks."""
        robust = np.concatenate(self.joined("robust"))
        broken_by = [b for part in self.joined("broken_by") for b in part]
        order = {name: i for i, name in enumerate(self.names)}
        after = np.array([-1 if b == "clean" else order.get(b, len(self.names)) for b in broken_by])
        per_attack = {}
        for i, name in enumerate(self.names):
            r = self.per_attack[name]
            per_attack[name] = {
                "accuracy": 1.0 - r["n_broken"] / r["n_points"] if r["n_points"] else None,
                "robust_accuracy": float(np.mean(after > i)),
                **{key: r[key] for key in _COUNTS},
                "no_gradient": r["no_gradient"],
            }
        n_forwards, n_gradients, unconfirmed = self.costs
        return State(
            robust=robust,
            broken_by=broken_by,
            x_adv=None,
            zero_gradient=np.concatenate(self.joined("zero_gradient")),
            clean_accuracy=float(np.mean(after >= 0)),
            randomized=randomized,
            n_forwards=probe + n_forwards,
            n_gradients=n_gradients,
            seconds=seconds,
            unconfirmed=unconfirmed,
            finished=list(self.names),
            per_attack=per_attack,
            from_probabilities=[n for n in self.names if n in self.from_probabilities],
        )


def _points(model, source, y, rows, totals):
    """`points_digest` of the concatenated data, from a second pass over a source that can be read again
    (None for a generator or an iterator: its points are gone)."""
    if not _sources.can_reread(source):
        return None
    labels = np.concatenate(totals.labels)
    digest = hashlib.sha256(f"{totals.dtype}{(len(labels), *totals.shape)}".encode())
    for xb, yb in _sources.blocks(source, y, rows):
        digest.update(np.ascontiguousarray(_plan.check_data(model, xb, yb)[0]).tobytes())
    digest.update(f"{labels.dtype}{labels.shape}".encode())
    digest.update(np.ascontiguousarray(labels).tobytes())
    return digest.hexdigest()


def evaluate_stream(model, source, y, *, suite, state_path, **options):
    """`gradkit.evaluate` of a stream `source` (see `_sources`), block by block; the arguments as there.
    The result's `x_adv` is None (the breaking examples are not held), and `points` is None for a
    generator (the points cannot be read twice to take their digest)."""
    _sources.check(source, y)
    if _checks.check_batch_size(options["batch_size"]) is None:
        _checks.fail(
            "batch_size",
            "an int >= 1 when x is a stream (the points of each block, seeded with seed + j)",
            None,
        )
    state_path = _stream_state.check_path(state_path)
    start, verbose = time.perf_counter(), options["verbose"]
    stream = iter(_sources.blocks(source, y, options["batch_size"]))
    held, stream = _ahead(stream, suite.probe)
    if not held:
        _checks.fail("x", "a source of at least one point", "an empty stream")
    config = _configure(model, *held[0], dict(options))
    config = dataclasses.replace(config, verbose=0)  # one bar over the blocks, not one per attack
    names = [e.name for e in config.entries]
    probe_x = np.concatenate([_plan.check_data(model, *b)[0] for b in held])[: suite.probe]
    randomized = suite.randomness(model, probe_x, config.batch_size)
    probe = 2 * len(probe_x) * len(as_ensemble(model).models)
    fp, records = None, []
    if state_path:
        x0, labels0, _ = _plan.check_data(model, *held[0])
        fp = _stream_state.fingerprint(model, x0, labels0, config)
        records = _stream_state.load(state_path, fp)
    totals, seconds = _Totals(names), sum(r.get("seconds", 0.0) for r in records)
    with tqdm(desc="blocks", unit="block", disable=verbose == 0) as bar:
        for j, (xb, yb) in enumerate(itertools.chain(held, stream)):
            x, labels, _ = _plan.check_data(model, xb, yb)
            _plan.check_range(x, config.clip_values)
            digest = _stream_state.block_digest(x, labels)
            if j < len(records):
                arrays, record = _stream_state.arrays(state_path, records[j], j, digest), records[j]
            else:
                t0 = time.perf_counter()
                arrays, record = _run_block(suite, model, x, labels, j, config, randomized)
                record["seconds"] = time.perf_counter() - t0
                if state_path:
                    _stream_state.save_block(state_path, fp, records, j, digest, arrays, record)
            totals.add(x, labels, arrays, record)
            bar.update(1)
    inputs = dataclasses.replace(config.inputs, data_range=(totals.low, totals.high))
    config = dataclasses.replace(config, inputs=inputs)
    state = totals.state(randomized, probe, seconds + time.perf_counter() - start)
    certified = totals.joined("certified")
    shares = totals.joined("shares")
    result = from_state(
        state,
        config,
        weights=suite.weights(model),
        shares=None if shares is None else np.concatenate(shares, axis=1),
        backend=keras.backend.backend(),
        certified=None if certified is None else np.concatenate(certified),
    )
    result.points = _points(model, source, y, config.batch_size, totals)
    return result
