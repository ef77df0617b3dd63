"""Compiled functions cached where they belong (`gradkit.gradients._cache`): nothing recompiles in the loops
users write, new ensembles of the same members, any sequence of row counts; the trace counts stay bounded
and memory stays flat."""

import keras
import numpy as np
import psutil

import gradkit
from gradkit.gradients import AttackGradient


def mlp(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(3, activation="softmax")])  # fmt: skip
    model.compile(loss="sparse_categorical_crossentropy")
    return model


def test_new_ensembles_of_the_same_members_reuse_one_compiled_function():
    members = [mlp(0), mlp(1), mlp(2)]
    x = np.random.RandomState(0).rand(16, 6).astype("float32")
    y = np.arange(16) % 3
    rng = np.random.RandomState(1)
    for _ in range(50):  # the eps loop a user writes, with a fresh ensemble each time
        weights = rng.uniform(0.1, 1.0, size=3)
        ens = gradkit.WeightedEnsemble(members, weights)
        adv = gradkit.fgsm(ens, x, y, eps=0.1)
        expected = sum(w * gradkit.input_gradient(m, x, y) for m, w in zip(members, weights))
        np.testing.assert_allclose(adv, x + 0.1 * np.sign(expected), atol=1e-6)
    # the attacks' compiled objective, shared by all 50 ensembles, traced once
    assert AttackGradient(gradkit.WeightedEnsemble(members, [3, 2, 1])).trace_count == 1
    assert gradkit.InputGradient(gradkit.WeightedEnsemble(members, [1, 2, 3])).trace_count <= 1


def test_changing_row_counts_trace_a_bounded_number_of_times_and_memory_stays_flat():
    model = mlp(3)
    data = np.random.RandomState(2).rand(70, 6).astype("float32")
    grad = gradkit.InputGradient(model)
    process = psutil.Process()
    for n in range(1, 61):  # 60 different row counts
        if n == 11:
            rss = process.memory_info().rss
        g = grad(data[:n], np.arange(n) % 3)
        assert g.shape == (n, 6)
    assert grad.trace_count <= 7  # row counts padded to the next power of two: 1, 2, 4, ..., 64
    assert process.memory_info().rss - rss < 100 * 2**20
    alone = gradkit.InputGradient(model, batch_size=None)(data[:3], [0, 1, 2])
    np.testing.assert_allclose(alone, grad(data[:3], [0, 1, 2]), rtol=1e-6)
