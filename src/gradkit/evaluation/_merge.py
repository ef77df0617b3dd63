"""Shards to JSON and back, and `merge_shards`: the checks that pieces belong together, then one `Shard`.

Shards merge only when their settings agree (same model weights, same data, eps, norm, attacks, seed,
steps, n_queries, clip_values, batch size and backend) and their rows cover `[0, n_total)` exactly once;
otherwise a ValueError names what differs, the missing or the duplicated rows.
"""

import dataclasses

import numpy as np

from gradkit import _checks
from gradkit.evaluation._shards import Shard
from gradkit.evaluation._state import State

_SCALARS = (
    "clean_accuracy",
    "randomized",
    "n_forwards",
    "n_gradients",
    "seconds",
    "unconfirmed",
    "finished",
    "per_attack",
    "from_probabilities",
)


def shard_to_dict(shard):
    """A JSON-able dict of a `Shard` (everything but `x_adv`)."""

    def state(s):
        arrays = {
            "robust": [bool(r) for r in s.robust],
            "broken_by": list(s.broken_by),
            "zero_gradient": [bool(z) for z in s.zero_gradient],
        }
        certified = None if s.certified is None else [bool(c) for c in s.certified]
        return {**arrays, **{k: getattr(s, k) for k in _SCALARS}, "certified": certified}

    return {
        "settings": shard.settings,
        "start": shard.start,
        "stop": shard.stop,
        "labels": shard.labels.tolist(),
        "prediction": shard.prediction.tolist(),
        "states": [state(s) for s in shard.states],
        "weights": list(shard.weights),
        "shares": None if shard.shares is None else np.asarray(shard.shares).tolist(),
    }


def shard_from_dict(record):
    """The `Shard` of `shard_to_dict`'s dict (its states' `x_adv` None); ValueError if malformed."""
    try:
        states = [
            State(
                np.asarray(s["robust"], bool),
                list(s["broken_by"]),
                None,
                np.asarray(s["zero_gradient"], bool),
                **{k: s[k] for k in _SCALARS},
                certified=None if s.get("certified") is None else np.asarray(s["certified"], bool),
            )
            for s in record["states"]
        ]
        shares = record["shares"]
        return Shard(
            dict(record["settings"]),
            int(record["start"]),
            int(record["stop"]),
            np.asarray(record["labels"], np.int64),
            np.asarray(record["prediction"], np.int64),
            states,
            tuple(record["weights"]),
            None if shares is None else np.asarray(shares, np.float64),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"not a gradkit evaluation shard ({type(err).__name__}: {err})") from None


def _check_same(shards, names):
    first = shards[0].settings
    for shard, name in zip(shards[1:], names[1:]):
        differ = [
            k for k in sorted(set(first) | set(shard.settings)) if first.get(k) != shard.settings.get(k)
        ]
        if differ:
            what = "; ".join(
                f"{k}: {first.get(k)!r} in {names[0]} vs {shard.settings.get(k)!r}" for k in differ
            )
            raise ValueError(f"Shards must come from the same evaluation. {name} differs in {what}")


def _check_cover(shards, names):
    n, at = shards[0].settings["n_total"], 0
    for shard, name in sorted(zip(shards, names), key=lambda p: (p[0].start, p[0].stop)):
        if shard.start > at:
            raise ValueError(f"Shards must cover every point once: rows [{at}, {shard.start}) are missing")
        if shard.start < at:
            raise ValueError(
                f"Shards must cover every point once: rows [{shard.start}, {min(at, shard.stop)}) are "
                f"duplicated ({name} holds [{shard.start}, {shard.stop}))"
            )
        at = shard.stop
    if at < n:
        raise ValueError(f"Shards must cover every point once: rows [{at}, {n}) are missing")


def _per_attack(states, sizes, n):
    """The per-attack records of states side by side: counts and costs summed, accuracies recomputed."""
    merged = {}
    for name in states[0].per_attack:
        records = [s.per_attack[name] for s in states]
        out = {k: sum(r[k] for r in records) for k in ("n_points", "n_broken", "n_forwards", "n_gradients")}
        robust = sum(round(r["robust_accuracy"] * m) for r, m in zip(records, sizes))
        merged[name] = {
            "accuracy": 1.0 - out["n_broken"] / out["n_points"] if out["n_points"] else None,
            "robust_accuracy": robust / n,
            **out,
            "seconds": sum(r["seconds"] for r in records),
            "no_gradient": any(r.get("no_gradient", False) for r in records),
        }
        if all("loss_tail" in r for r in records):  # check_convergence: the ascents' loss tails, summed
            merged[name]["loss_tail"] = [sum(t) for t in zip(*(r["loss_tail"] for r in records))]
    return merged


def _merge_states(states, sizes, clean_accuracy):
    n = sum(sizes)
    x_adv = [s.x_adv for s in states]
    merged = State(
        np.concatenate([s.robust for s in states]),
        [b for s in states for b in s.broken_by],
        None if any(a is None for a in x_adv) else np.concatenate(x_adv),
        np.concatenate([s.zero_gradient for s in states]),
        clean_accuracy,
        max(s.randomized for s in states),
    )
    for key in ("n_forwards", "n_gradients", "seconds", "unconfirmed"):
        setattr(merged, key, sum(getattr(s, key) for s in states))
    merged.finished = list(states[0].finished)
    merged.per_attack = _per_attack(states, sizes, n)
    merged.from_probabilities = list(dict.fromkeys(p for s in states for p in s.from_probabilities))
    if all(s.certified is not None for s in states):
        merged.certified = np.concatenate([s.certified for s in states])
    return merged


def merge_shards(shards, names=None):
    """One `Shard` of all `shards` (rows `[0, n_total)`), equal to one run over all points.

    Args:
        shards: a non-empty list of `Shard`s; names: what to call each in errors (default "shard i").

    Raises:
        ValueError: settings that differ (named, with both values), missing or duplicated rows, or
            shards whose attacks did not all finish.
    """
    shards = list(shards)
    if not shards:
        _checks.fail("shards", "a non-empty list of shards", shards)
    names = list(names or (f"shard {i}" for i in range(len(shards))))
    _check_same(shards, names)
    _check_cover(shards, names)
    shards = sorted(shards, key=lambda s: s.start)
    if len({tuple(s.finished) for shard in shards for s in shard.states}) > 1:
        raise ValueError("Shards must be finished: some did not run every attack (rerun them to resume)")
    sizes = [s.stop - s.start for s in shards]
    labels = np.concatenate([s.labels for s in shards])
    prediction = np.concatenate([s.prediction for s in shards])
    clean = float(np.mean(labels == prediction))
    states = [
        _merge_states([s.states[i] for s in shards], sizes, clean) for i in range(len(shards[0].states))
    ]
    has_shares = all(s.shares is not None for s in shards)
    shares = np.concatenate([s.shares for s in shards], axis=1) if has_shares else None
    first = shards[0]
    return dataclasses.replace(
        first, start=0, stop=sum(sizes), labels=labels, prediction=prediction, states=states, shares=shares
    )
