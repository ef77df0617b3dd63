"""`_tasks`: a process done with its own blocks finishes another's; the merged result equals one process's
point for point (two threads stand for the two processes, a dict for the group's key-value store)."""

import threading
import time

import keras
import numpy as np
import pytest

from gradkit import evaluation
from gradkit.evaluation import _merge, _tasks

OPTIONS = dict(
    epsilons=[0.1, 0.15], attacks=["apgd-ce", "apgd-t", "square"], steps=4, n_queries=20, batch_size=16,
    seed=3, clip_values=(0.0, 1.0), verbose=0,
)  # fmt: skip


class _Store:
    """`backend.key_value()`'s add, set, get (waits for the key) and has, in memory."""

    def __init__(self):
        self.values, self.changed = {}, threading.Condition()

    def add(self, key, amount=1):
        with self.changed:
            self.values[key] = self.values.get(key, 0) + amount
            self.changed.notify_all()
            return self.values[key]

    def set(self, key, value):
        with self.changed:
            self.values[key] = value if isinstance(value, bytes) else str(value).encode()
            self.changed.notify_all()

    def get(self, key):
        with self.changed:
            assert self.changed.wait_for(lambda: key in self.values, timeout=300), key
            return self.values[key]

    def has(self, key):
        with self.changed:
            return key in self.values


class _Slow(_tasks.Tasks):
    """An owner that reaches its later attacks only after the other process finished its own blocks."""

    def claim(self, name, k):
        if self.names.index(name) > 0 and k not in self.stolen:
            deadline = time.monotonic() + 300
            while not self.store.has(self._key("own", 0)) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.5)  # the helper looks every 0.2 s
        return super().claim(name, k)


@pytest.fixture(scope="module")
def model_and_data():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (48, 6)).astype("float32")
    y = (x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile(keras.optimizers.Adam(0.03), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=10, batch_size=16, verbose=0)
    return model, x, y


@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="Keras' JAX variables are not read from a second thread here; the key-value store is PyTorch's",
)
def test_blocks_finished_by_another_process_give_the_one_process_result(model_and_data):
    model, x, y = model_and_data
    one = evaluation.evaluate_shard(model, x, y, **OPTIONS)
    store, shards = _Store(), [None, None]
    tasks = [_tasks.Tasks(store, "t", 0, 2, len(x), 16), _Slow(store, "t", 1, 2, len(x), 16)]
    rows = [evaluation.shard_rows(len(x), r, 2, 16) for r in range(2)]  # blocks [0] and [1, 2]

    def rank(r):
        shards[r] = evaluation.evaluate_shard(model, x, y, rows=rows[r], tasks=tasks[r], **OPTIONS)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert tasks[1].stolen, "rank 0 finished none of rank 1's blocks"
    assert all(a > 0 for a in tasks[1].stolen.values())  # the first attack always stays with its owner
    merged = _merge.merge_shards(shards)
    for mine, theirs in zip(merged.states, one.states):
        np.testing.assert_array_equal(mine.robust, theirs.robust)
        np.testing.assert_array_equal(mine.x_adv, theirs.x_adv)
        np.testing.assert_array_equal(mine.zero_gradient, theirs.zero_gradient)
        assert mine.broken_by == theirs.broken_by
        assert mine.finished == theirs.finished == OPTIONS["attacks"]
        assert mine.from_probabilities == theirs.from_probabilities
        for name in OPTIONS["attacks"]:
            for key in ("n_points", "n_broken", "robust_accuracy", "accuracy", "n_forwards", "n_gradients"):
                assert mine.per_attack[name][key] == pytest.approx(theirs.per_attack[name][key]), (name, key)
    assert merged.states[-1].robust.sum() < merged.states[0].robust.sum() <= 48  # the attacks broke points
