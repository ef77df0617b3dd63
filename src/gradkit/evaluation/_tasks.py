"""The cascade's tail shared between the processes of a group: one done with its own blocks takes over the
rest of another's.

An attack on block j depends only on that block's state after the previous attack, on its seed
(`seed + j`) and on the model, so the block may finish its cascade in another process with the same
result point for point; sharing the tail evens out the work (`Tasks`).
"""

import dataclasses
import io
import json
import time
import uuid

import numpy as np

from gradkit import backend
from gradkit.evaluation import _convergence, _shards, _state
from gradkit.evaluation._entry_run import run_entry

_POLL = 0.2  # seconds between looks at the other processes' progress


def start(n, block):
    """A `Tasks` over `n` points in blocks of `block` rows for the running process group when it has a
    key-value store, else None. Every process of the group calls it."""
    store, group = backend.key_value(), backend.processes()
    if store is None or group is None:
        return None
    prefix = backend.all_gather(f"gradkit/{uuid.uuid4().hex}")[0]  # rank 0's: one namespace per evaluation
    return Tasks(store, prefix, *group, n, block)


def _pack(arrays, meta):
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
    return buffer.getvalue()


def _unpack(data):
    with np.load(io.BytesIO(data)) as loaded:
        return {k: loaded[k] for k in loaded.files if k != "meta"}, json.loads(str(loaded["meta"]))


class Tasks:
    """One evaluation's tasks in a group of `size` processes over `n` points in blocks of `block` rows,
    through `store` (`backend.key_value()`) under the keys starting with `prefix`.

    Each process owns the contiguous blocks `shard_rows` gives it and runs the cascade on them attack
    by attack, as without sharing. Whole blocks split unevenly (450 points in blocks of 64: 256 and 194
    rows), and the points left to attack differ between blocks. Through the store, per eps:

    - before attacking block j with the cascade's attack a > 0 its owner claims the task (an atomic
      `add`); after any attack on it, it publishes the block's state and its count of points still
      robust;
    - a process done with its own blocks takes another's block whose next attack is unclaimed and whose
      previous one is published: it claims it and the block's later attacks, runs them on the published
      state and publishes the block's final state and records. It picks the block whose rest is largest
      but at most half of the owner's remaining work (estimated as points left times its own seconds
      per point of each attack), else the smallest rest;
    - an owner whose claim fails skips that block for the rest of the cascade, and at the end folds the
      block's results into its state: points, records and costs as if it had run them.
    """

    def __init__(self, store, prefix, rank, size, n, block):
        self.store, self.prefix, self.rank, self.size = store, prefix, rank, size
        self.n, self.block = n, block
        rows = [_shards.shard_rows(n, r, size, block) for r in range(size)]
        self.blocks = [range(start // block, -(-stop // block)) for start, stop in rows]

    def begin(self, eps_index, model, x, labels, config, state, start):
        """Starts eps number `eps_index` of `config`: this process's `state` over the rows from `start` of
        all points `x`, `labels`."""
        self.i, self.model, self.x, self.labels, self.config = eps_index, model, x, labels, config
        self.state, self.start = state, start
        self.names = [e.name for e in _convergence.entries(config)]
        self.stolen = {}  # block -> the attack from which another process runs it
        for k in self.blocks[self.rank]:
            self._progress(k, -1)

    def _key(self, *parts):
        return "/".join([self.prefix, str(self.i), *map(str, parts)])

    def _mine(self, k):
        """Block k's rows in this process's state."""
        return slice(k * self.block - self.start, min((k + 1) * self.block, self.n) - self.start)

    def _progress(self, k, a):
        robust = int(self.state.robust[self._mine(k)].sum())
        self.store.set(self._key("progress", k), f"{a},{robust}")

    def claim(self, name, k):
        """Whether this process runs attack `name` on its block `k` (False: another one does)."""
        if k in self.stolen:
            return False
        a = self.names.index(name)
        if a == 0 or self.store.add(self._key("claim", a, k)) == 1:
            return True
        self.stolen[k] = a
        return False

    def done(self, name, k):
        """Publishes block `k`'s progress after attack `name`, and its state where another process may
        take the block's next attack (none follows the last)."""
        a, rows = self.names.index(name), self._mine(k)
        if a < len(self.names) - 1:
            s = self.state
            arrays = dict(robust=s.robust[rows], x_adv=s.x_adv[rows], zero_gradient=s.zero_gradient[rows])
            self.store.set(self._key("state", a, k), _pack(arrays, {"broken_by": s.broken_by[rows]}))
        self._progress(k, a)

    def finish(self):
        """After this process's own cascade: helps the others, then folds in what they ran of its blocks."""
        self.store.set(self._key("own", self.rank), "1")
        while self._help():
            pass
        for k, a in sorted(self.stolen.items()):
            self._fold(k, a, *_unpack(self.store.get(self._key("result", k))))

    def _rates(self):
        """Seconds per point of each attack in this process (its largest known rate where it ran none)."""
        known = {n: r["seconds"] / r["n_points"] for n, r in self.state.per_attack.items() if r["n_points"]}
        fallback = max(known.values(), default=1.0)
        return [known.get(n, fallback) for n in self.names]

    def _help(self):
        """Runs one block's rest for another process; False when none is left to take."""
        rates, waiting = self._rates(), False
        for r in range(self.size):
            if r == self.rank:
                continue
            owner_done = self.store.has(self._key("own", r))
            candidates, remaining = [], 0.0
            for k in self.blocks[r]:
                if not self.store.has(self._key("progress", k)):
                    waiting = True
                    continue
                a, robust = map(int, self.store.get(self._key("progress", k)).decode().split(","))
                rest = robust * sum(rates[a + 1 :])
                remaining += rest
                if (
                    robust
                    and 0 <= a < len(self.names) - 1
                    and not self.store.has(self._key("claim", a + 1, k))
                ):
                    candidates.append((rest, k, a + 1))
            waiting |= not owner_done
            if candidates:
                fit = [c for c in candidates if c[0] <= remaining / 2]
                rest, k, a = max(fit) if fit else min(candidates)
                if self.store.add(self._key("claim", a, k)) == 1:
                    self._run(k, a)
                return True
        if waiting:
            time.sleep(_POLL)
        return waiting

    def _run(self, k, a0):
        """Runs attacks `a0`... on another process's block `k` and publishes the results."""
        for a in range(a0 + 1, len(self.names)):
            self.store.add(self._key("claim", a, k))
        arrays, meta = _unpack(self.store.get(self._key("state", a0 - 1, k)))
        rows = slice(k * self.block, min((k + 1) * self.block, self.n))
        state = _state.State(
            arrays["robust"].copy(),
            list(meta["broken_by"]),
            arrays["x_adv"].copy(),
            arrays["zero_gradient"].copy(),
            0.0,
            self.state.randomized,
        )
        entries = {e.name: e for e in _convergence.entries(self.config)}
        counts, config = [], dataclasses.replace(self.config, verbose=0)
        for name in self.names[a0:]:
            run_entry(self.model, self.x[rows], self.labels[rows], entries[name], config, state, k)
            counts.append(int(state.robust.sum()))
        meta = {
            "broken_by": state.broken_by,
            "counts": counts,
            "per_attack": state.per_attack,
            "costs": [state.n_forwards, state.n_gradients, state.unconfirmed],
            "from_probabilities": state.from_probabilities,
            "blocks": state.blocks,
        }
        arrays = {"robust": state.robust, "x_adv": state.x_adv, "zero_gradient": state.zero_gradient}
        self.store.set(self._key("result", k), _pack(arrays, meta))

    def _fold(self, k, a0, arrays, meta):
        """Block `k`'s results from attack `a0` on, run elsewhere, into this process's state."""
        s, rows = self.state, self._mine(k)
        m, stale = len(s.robust), int(s.robust[rows].sum())
        s.robust[rows], s.x_adv[rows], s.zero_gradient[rows] = (
            arrays["robust"],
            arrays["x_adv"],
            arrays["zero_gradient"],
        )
        s.broken_by[rows] = meta["broken_by"]
        s.n_forwards, s.n_gradients, s.unconfirmed = (
            a + b for a, b in zip((s.n_forwards, s.n_gradients, s.unconfirmed), meta["costs"])
        )
        for name, count in zip(self.names[a0:], meta["counts"]):
            mine, theirs = s.per_attack[name], meta["per_attack"][name]
            for key in ("n_points", "n_broken", "n_forwards", "n_gradients", "seconds"):
                mine[key] += theirs[key]
            mine["no_gradient"] = mine["no_gradient"] or theirs["no_gradient"]
            mine["accuracy"] = 1.0 - mine["n_broken"] / mine["n_points"] if mine["n_points"] else None
            mine["robust_accuracy"] = (round(mine["robust_accuracy"] * m) - stale + count) / m
        s.seconds += sum(meta["per_attack"][name]["seconds"] for name in self.names[a0:])
        for name, blocks in meta["blocks"].items():
            s.blocks[name] = sorted({*s.blocks.get(name, ()), *blocks})
        given = set(s.from_probabilities) | set(meta["from_probabilities"])
        s.from_probabilities = [name for name in self.names if name in given]
