"""Evaluations in pieces: which rows a shard owns, one shard's cascade at several eps, and merging shards.

The points are cut into blocks of `batch_size` consecutive rows and `evaluate` seeds its attack calls on
block j with `seed + j` (see `_entry_run.run_entry`), so a shard made of whole blocks attacks exactly
what the whole run attacks there: the merged shards equal the one-process result point for point.
Several eps run in increasing order, each only on the points every smaller eps left robust (a point
broken at eps e stays broken at e' > e: the same example lies in the larger ball), as `gradkit study`
does.
"""

import dataclasses

import keras
import numpy as np

from gradkit import _checks
from gradkit.attacks import decide
from gradkit.evaluation import _cascade, _plan, _scale, _state, _versions
from gradkit.evaluation._result import from_state
from gradkit.gradients import preprocessed, row_shape

# settings that follow from the others (the model, the data, the version): not in a state's fingerprint
_DERIVED = ("skipped", "inputs", "certify")


@dataclasses.dataclass
class Shard:
    """The per-point outcome of the cascade on the rows `[start, stop)` of `n_total` points.

    Attributes:
        settings: dict, what must agree between shards of one evaluation: "model" (weights' SHA-256),
            "x", "y" (the whole data's digests), "n_total", "epsilons", "norm", "attacks", "seed",
            "steps", "n_queries", "clip_values", "batch_size", "backend", "skipped" (`[attack, reason]`
            of the version's attacks that did not run) and "inputs" (`_scale.Inputs.to_dict()` of all
            the data: classes, features, the data's and the model's input ranges), which shard.json
            and a merge keep.
        start, stop: int, the rows held.
        labels, prediction: int64 `(stop - start,)`: the true and the clean predicted classes.
        states: one `_state.State` per eps (ascending); their `x_adv` is None once read from JSON.
        weights: the ensemble weights, or () for one network.
        shares: float `(K, stop - start)` members' gradient shares of an ensemble, or None.
        resumed: `(eps, what)` for each eps resumed from a state file: what it held ("apgd-ce done (2
            blocks), apgd-t 1 of 2 blocks"), not redone.
    """

    settings: dict
    start: int
    stop: int
    labels: np.ndarray
    prediction: np.ndarray
    states: list
    weights: tuple = ()
    shares: np.ndarray | None = None
    resumed: list = dataclasses.field(default_factory=list)

    def evaluations(self):
        """One `Evaluation` per eps (ascending), with its flags; `x_adv` as held (None after JSON)."""
        entries = _plan.plan(list(self.settings["attacks"]), bool(self.weights))
        norm = _checks.check_norm(self.settings["norm"], allowed=_checks.GRADIENT_NORMS)
        config = _plan.Config(
            eps=0.0,
            norm=norm,
            entries=entries,
            clip_values=None if self.settings["clip_values"] is None else tuple(self.settings["clip_values"]),
            batch_size=self.settings["batch_size"],
            seed=self.settings["seed"],
            n_queries=self.settings["n_queries"],
            steps=self.settings["steps"],
            verbose=0,
            version=self.settings.get("version", "custom"),
            eot_iter=self.settings.get("eot_iter", 20),
            certify=self.settings.get("certify"),
            skipped=tuple(tuple(s) for s in self.settings.get("skipped", ())),
            inputs=_scale.Inputs.from_dict(self.settings.get("inputs")),
            check_convergence=bool(self.settings.get("check_convergence", False)),
        )
        return [
            from_state(
                state,
                dataclasses.replace(config, eps=eps),
                weights=self.weights,
                shares=self.shares,
                backend=self.settings["backend"],
                certified=state.certified,
                start=self.start,
            )
            for eps, state in zip(self.settings["epsilons"], self.states)
        ]


def shard_rows(n, index, count, block, *, name="count"):
    """The rows `(start, stop)` of shard `index` of `count` over `n` points in blocks of `block` rows.

    `name`: what errors call `count` (e.g. "processes" for a process group's size, "--shard").

    Whole blocks are dealt out contiguously and as evenly as possible (shard k gets blocks
    `[k * B // count, (k + 1) * B // count)` of the B = ceil(n / block)).

    Raises:
        ValueError: `count` < 1, `index` outside [0, count), or more shards than blocks.
    """
    count = _checks.check_int(count, "count", minimum=1)
    index = _checks.check_int(index, "index", minimum=0)
    if index >= count:
        _checks.fail("index", f"in [0, {count})", index)
    n_blocks = -(-n // block)
    if count > n_blocks:
        _checks.fail(
            name,
            f"at most the number of blocks of {block} rows in {n} points ({n_blocks}; a smaller "
            "batch size makes more)",
            count,
        )
    first, last = index * n_blocks // count, (index + 1) * n_blocks // count
    return first * block, min(last * block, n)


def _epsilons(epsilons):
    """A non-empty, strictly ascending list of floats >= 0."""
    values = [epsilons] if np.ndim(epsilons) == 0 else list(epsilons)
    values = [_checks.check_eps(e, "epsilons") for e in values]
    if not values or any(b <= a for a, b in zip(values, values[1:])):
        _checks.fail("epsilons", "a non-empty, strictly increasing list of eps >= 0", epsilons)
    return values


def _rows(rows, n, block):
    if rows is None:
        return 0, n
    start, stop = (int(r) for r in rows)
    if not (0 <= start < stop <= n) or start % block or (stop % block and stop != n):
        _checks.fail("rows", f"(start, stop) of whole blocks of {block} rows within [0, {n}]", rows)
    return start, stop


def _state_path(state_path, i, k):
    """The state file of eps number `i` of `k`: `state_path` itself for one eps, else `<stem>-<i><ext>`."""
    if state_path is None or k == 1:
        return state_path
    stem, dot, ext = state_path.rpartition(".")
    return f"{stem}-{i}.{ext}" if dot and "/" not in ext else f"{state_path}-{i}"


_carry = _state.carry  # the start of the next eps


def evaluate_shard(
    model,
    x,
    y,
    *,
    epsilons,
    rows=None,
    state_path=None,
    norm=np.inf,
    version=None,
    attacks=None,
    eot_iter=20,
    clip_values=None,
    batch_size=None,
    seed=0,
    n_queries=5000,
    steps=100,
    verbose=1,
    tasks=None,
    certify=None,
    check_convergence=False,
    preprocessing=None,
    mask=None,
    attack_inputs=None,
):
    """`gradkit.evaluate`'s cascade at every eps of `epsilons` on the rows `rows` of `x`.

    Args:
        model, x, y, norm, version, attacks, eot_iter, clip_values, seed, n_queries, steps, verbose,
            certify, check_convergence, preprocessing, mask, attack_inputs: as
            for `gradkit.evaluate` (callables in `attacks` and a `surrogate` are not supported here).
        epsilons: float >= 0 or a strictly increasing list of them; each eps attacks only the points
            every smaller one left robust.
        rows: None (default: all) or `(start, stop)` of whole blocks of `batch_size` rows (`shard_rows`).
        batch_size: rows per compiled call and per block; None (default) makes all rows one block.
        state_path: None or a JSON path: the state is saved there after each block and each attack, and
            a rerun with the same arguments resumes from it at the next unfinished block (one file per
            eps when several: `<stem>-<i>.json`); every file is checked before any attack.
        tasks: None, or a process group's `_tasks.Tasks` (`evaluate_processes`): blocks of this shard may
            finish in another process, and this one may finish another's, with the same results.

    Returns:
        A `Shard`; with `rows=None` and one eps its `evaluations()[0]` equals `gradkit.evaluate`'s result.

    Raises:
        ValueError, TypeError: as `gradkit.evaluate`, for bad `epsilons` or `rows`; before any work.
    """
    _versions.check_version(version, attacks, eot_iter)
    model = preprocessed(model, preprocessing, row_shape(x))
    _, model, x, clip_values, mask = _cascade.flat_inputs(model, x, attack_inputs, clip_values, mask)
    x, labels, classes = _plan.check_data(model, x, y)
    epsilons = _epsilons(epsilons)
    config = _plan.check_config(
        model,
        classes,
        version=version,
        attacks=attacks,
        eot_iter=eot_iter,
        eps=epsilons[0],
        norm=norm,
        clip_values=clip_values,
        batch_size=batch_size,
        seed=seed,
        n_queries=n_queries,
        steps=steps,
        verbose=verbose,
        inputs=_scale.inputs(model, x, classes),
        certify=certify,
        check_convergence=check_convergence,
        mask=mask,
    )
    if any(e.fn is not None for e in config.entries):
        _checks.fail("attacks", "registry attack names (a shard is saved and merged by name)", attacks)
    _plan.check_range(x, config.box or config.clip_values, config.mask)
    block = config.batch_size or len(x)
    start, stop = _rows(rows, len(x), block)
    settings = _settings(model, x, labels, config, epsilons)
    identity = {k: v for k, v in settings.items() if k not in _DERIVED}  # a state file's fingerprint
    xs, ys = x[start:stop], labels[start:stop]
    prediction = decide(model, xs, config.batch_size).astype(np.int64)
    state_path, states = _state.check_path(state_path), []
    paths = [_state_path(state_path, i, len(epsilons)) for i in range(len(epsilons))]
    fps = [{**identity, "eps": eps, "rows": [start, stop]} for eps in epsilons]
    loaded = [_state.load(path, fp) if path else None for path, fp in zip(paths, fps)]  # before any attack
    names = [e.name for e in config.entries]
    resumed = [
        (eps, _state.progress(s, names, block, start // block)) for eps, s in zip(epsilons, loaded) if s
    ]
    for i, eps in enumerate(epsilons):
        path, fp, state = paths[i], fps[i], loaded[i]
        if state is None:
            state = _cascade.clean(model, xs, ys, config, prediction) if not states else _carry(states[-1])
        eps_config = dataclasses.replace(config, eps=eps)
        if tasks is not None:
            tasks.begin(i, model, x, labels, eps_config, state, start)
        _cascade.cascade(
            model, xs, ys, eps_config, state, state_path=path, fp=fp, first_block=start // block, tasks=tasks
        )
        if tasks is not None:
            tasks.finish()
            if path and tasks.stolen:  # what other processes ran of this one's blocks is folded in now
                _state.save(path, fp, state)
        state.certified = _cascade.certified_of(model, xs, ys, eps_config)
        states.append(state)
    shares = _cascade.shares_of(model, xs, ys, config)
    return Shard(settings, start, stop, ys, prediction, states, _cascade.weights(model), shares, resumed)


def _settings(model, x, labels, config, epsilons):
    fp = _state.fingerprint(model, x, labels, config)
    fp.pop("eps")
    return {
        **fp,
        "epsilons": epsilons,
        "n_total": len(x),
        "batch_size": config.batch_size,
        "backend": keras.backend.backend(),
        "skipped": [list(s) for s in config.skipped],
        "inputs": config.inputs.to_dict(),
        "certify": config.certify,
    }
