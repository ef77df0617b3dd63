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
import time

import keras
import numpy as np
from tqdm.auto import tqdm

from gradkit import _checks
from gradkit.attacks import decide
from gradkit.evaluation import _convergence, _plan, _scale, _sources, _state, _stream_state, _versions
from gradkit.evaluation._entry_run import fooled
from gradkit.evaluation._result import from_state
from gradkit.evaluation._state import State
from gradkit.evaluation._stream_state import TRACE
from gradkit.gradients import as_ensemble, check_surrogate


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
    """`(held, every)`: the first blocks until they hold `rows` points (or the stream ends), and an
    iterator of all the blocks, those first (each let go once read)."""
    held = []
    for block in blocks:
        held.append(block)
        if sum(len(b[1]) for b in held) >= rows:
            break

    def every():
        while held:
            yield held.pop(0)
        yield from blocks

    return list(held), every()


def _configure(model, x0, y0, options):
    """The `Config` checked on the first block, as `evaluate` checks arrays."""
    _versions.check_version(options["version"], options["attacks"], options["eot_iter"])
    x0, _, classes = _plan.check_data(model, x0, y0)
    options["surrogate"] = check_surrogate(options.get("surrogate"), model, x0)
    return _plan.check_config(model, classes, **options, inputs=_scale.inputs(model, x0, classes))


def _first_state(model, x, labels, config, randomized, prediction):
    """The block's state before any attack: judged by `fooled` (as `evaluate`), or by `prediction`
    (as `evaluate_shard`)."""
    state = State(np.zeros(len(x), bool), [], x.copy(), np.zeros(len(x), bool), 0.0, randomized)
    if prediction is None:
        state.robust = ~fooled(model, x, labels, config, state)
    else:
        state.robust, state.n_forwards = prediction == labels, len(x)
    state.broken_by = [None if r else "clean" for r in state.robust]
    return state


def _run_block(suite, model, x, labels, j, configs, randomized, prediction=None):
    """`(arrays, record)`: the per-point arrays (keys suffixed with the eps's number) and the costs
    (one record per eps) of the whole cascade on block `j` at each of `configs`' eps in turn, each on
    the points the smaller ones left robust."""
    arrays, records, state = {"prediction": prediction}, [], None
    for i, config in enumerate(configs):
        if state is None:
            state = _first_state(model, x, labels, config, randomized, prediction)
        else:
            state = _state.carry(state)
        suite.cascade(model, x, labels, config, state, first_block=j)
        arrays.update({f"robust_{i}": state.robust, f"broken_by_{i}": state.broken_by})
        arrays[f"zero_gradient_{i}"] = state.zero_gradient
        arrays[f"certified_{i}"] = suite.certified_of(model, x, labels, config)
        per_attack = {
            name: {
                **{k: r[k] for k in (*_stream_state.COUNTS, TRACE) if k in r},
                "no_gradient": r["no_gradient"],
            }
            for name, r in state.per_attack.items()
        }
        entries = _convergence.entries(config)
        counts = [round(state.per_attack[e.name]["robust_accuracy"] * len(x)) for e in entries]
        costs = [state.n_forwards, state.n_gradients, state.unconfirmed]
        records.append(dict(per_attack=per_attack, counts=counts, costs=costs))
        records[-1]["from_probabilities"] = state.from_probabilities
    shares = suite.shares_of(model, x, labels, configs[0])
    arrays["shares"] = None if shares is None else np.asarray(shares)
    return arrays, {"eps": records}


@dataclasses.dataclass
class Pass:
    """One pass over a stream: the checked `config` (its `inputs` over all the data), one `State` per
    eps (`x_adv` None), the labels, the clean predictions (or None), the members' gradient shares (or
    None), the digest of `x` (`_state.digest` of the concatenated arrays) and the points' shape."""

    config: object
    states: list
    labels: np.ndarray
    prediction: np.ndarray | None
    shares: np.ndarray | None
    x_digest: str
    shape: tuple
    dtype: object
    resumed: int = 0  # the blocks read back from the state file


def _open(model, source, y, suite, epsilons, options):
    """`(configs, probe_x, randomized, stream)`: the checked settings (one `Config` per eps, from the
    first block), the rows probed for randomness, the probe's verdict and the iterator of all blocks."""
    _sources.check(source, y)
    if _checks.check_batch_size(options["batch_size"]) is None:
        expected = "an int >= 1 when x is a stream (the points of each block, seeded with seed + j)"
        _checks.fail("batch_size", expected, None)
    held, stream = _ahead(iter(_sources.blocks(source, y, options["batch_size"])), suite.probe)
    if not held:
        _checks.fail("x", "a source of at least one point", "an empty stream")
    config = dataclasses.replace(_configure(model, *held[0], dict(options, eps=epsilons[0])), verbose=0)
    probe_x = np.concatenate([_plan.check_data(model, *b)[0] for b in held])[: suite.probe].copy()
    randomized = suite.randomness(model, probe_x, config.batch_size)
    return [dataclasses.replace(config, eps=eps) for eps in epsilons], probe_x, randomized, stream


def run(model, source, y, *, suite, state_path, epsilons, judge_by_prediction, **options):
    """The cascade at each of `epsilons` on each block of a stream (see the module docstring), the state
    saved after each block when `state_path` is set and resumed from it; a `Pass`."""
    state_path = _state.check_path(state_path)
    start, verbose = time.perf_counter(), options["verbose"]
    configs, probe_x, randomized, stream = _open(model, source, y, suite, epsilons, options)
    config, fp, records = configs[0], None, []
    if state_path:
        fp = _stream_state.fingerprint(model, probe_x, config, epsilons, judge_by_prediction)
        records = _stream_state.load(state_path, fp)
    resumed = len(records)  # `records` grows as blocks finish
    names = [e.name for e in _convergence.entries(config)]  # with the reruns of check_convergence
    totals, parts = (
        [_stream_state.Totals(names, i) for i in range(len(epsilons))],
        {"labels": [], "prediction": []},
    )
    parts["shares"], x_hash, low, high = [], hashlib.sha256(), np.inf, -np.inf
    seconds = sum(r.get("seconds", 0.0) for r in records)
    with tqdm(desc="blocks", unit="block", disable=verbose == 0) as bar:
        for j, (xb, yb) in enumerate(stream):
            x, labels, _ = _plan.check_data(model, xb, yb)
            _plan.check_range(x, config.box or config.clip_values, config.mask)
            digest = _stream_state.block_digest(x, labels) if state_path else None
            if j < len(records):
                arrays, record = _stream_state.arrays(state_path, records[j], j, digest), records[j]
            else:
                t0 = time.perf_counter()
                prediction = (
                    decide(model, x, config.batch_size).astype(np.int64) if judge_by_prediction else None
                )
                arrays, record = _run_block(suite, model, x, labels, j, configs, randomized, prediction)
                record["seconds"] = time.perf_counter() - t0
                if state_path:
                    _stream_state.save_block(state_path, fp, records, j, digest, arrays, record)
            for total, r in zip(totals, record["eps"]):
                total.add(arrays, r)
            parts["labels"].append(labels)
            parts["prediction"].append(arrays.get("prediction"))
            parts["shares"].append(arrays.get("shares"))
            x_hash.update(np.ascontiguousarray(x))  # the buffer, not a copy of it
            low, high, shape, dtype = (
                min(low, float(x.min())),
                max(high, float(x.max())),
                x.shape[1:],
                x.dtype,
            )
            bar.update(1)
    labels = np.concatenate(parts["labels"])
    inputs = dataclasses.replace(config.inputs, data_range=(low, high))
    probe = 2 * len(probe_x) * len(as_ensemble(model).models)
    seconds += time.perf_counter() - start
    states = [
        t.state(randomized, probe if i == 0 or not judge_by_prediction else 0, seconds)
        for i, t in enumerate(totals)
    ]
    return Pass(
        config=dataclasses.replace(config, inputs=inputs),
        states=states,
        labels=labels,
        prediction=np.concatenate(parts["prediction"]) if judge_by_prediction else None,
        shares=None if any(s is None for s in parts["shares"]) else np.concatenate(parts["shares"], axis=1),
        x_digest=x_hash.hexdigest() + f":{dtype.str}:{(len(labels), *shape)}",
        shape=shape,
        dtype=dtype,
        resumed=min(resumed, len(parts["labels"])),
    )


def points(model, source, y, rows, done):
    """`points_digest` of the concatenated data of a finished `Pass` `done`, from a second pass over a
    source that can be read again (None for a generator or an iterator: its points are gone)."""
    if not _sources.can_reread(source):
        return None
    labels = done.labels
    digest = hashlib.sha256(f"{done.dtype}{(len(labels), *done.shape)}".encode())
    for xb, yb in _sources.blocks(source, y, rows):
        digest.update(np.ascontiguousarray(_plan.check_data(model, xb, yb)[0]))
    digest.update(f"{labels.dtype}{labels.shape}".encode())
    digest.update(np.ascontiguousarray(labels).tobytes())
    return digest.hexdigest()


def evaluate_stream(model, source, y, *, suite, state_path, **options):
    """`gradkit.evaluate` of a stream `source` (see `_sources`), block by block; the arguments as there.
    The result's `x_adv` is None (the breaking examples are not held), and `points` is None for a
    generator (the points cannot be read twice to take their digest)."""
    eps = options.pop("eps")
    done = run(
        model,
        source,
        y,
        suite=suite,
        state_path=state_path,
        epsilons=[eps],
        judge_by_prediction=False,
        **options,
    )
    state = done.states[0]
    result = from_state(
        state,
        done.config,
        weights=suite.weights(model),
        shares=done.shares,
        backend=keras.backend.backend(),
        certified=state.certified,
    )
    result.points = points(model, source, y, done.config.batch_size, done)
    return result
