"""`evaluate` on data that does not fit in memory (`_sources`, `_streaming`): generators, PyDataset,
memory-mapped arrays, tf.data and DataLoader give the result of the concatenated arrays, and a stream
resumes at its next block."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.evaluation import _sources, _streaming

from conftest import BACKEND

N, BATCH = 50, 16
KW = dict(eps=0.08, attacks=["fgsm", "apgd-ce"], steps=3, batch_size=BATCH, clip_values=(0, 1), verbose=0)


@pytest.fixture(scope="module")
def problem():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    model.set_weights(
        [np.random.default_rng(0).normal(size=(6, 3)).astype("float32"), np.zeros(3, "float32")]
    )
    x = np.random.default_rng(1).uniform(size=(N, 6)).astype("float32")
    y = np.argmax(model.predict(x, verbose=0), 1)
    y[:5] = (y[:5] + 1) % 3  # five points misclassified clean
    return model, x, y, gradkit.evaluate(model, x, y, **KW)


def batches(x, y, size=7):
    """A generator of (x, y) batches of `size` rows: not the evaluation's block size."""
    for start in range(0, len(x), size):
        yield x[start : start + size], y[start : start + size]


def assert_same(streamed, arrays, points=True):
    assert 0 < arrays.robust_accuracy < arrays.clean_accuracy < 1  # some broken clean, some by attacks
    np.testing.assert_array_equal(streamed.robust, arrays.robust)
    assert streamed.broken_by == arrays.broken_by
    assert (streamed.clean_accuracy, streamed.robust_accuracy) == (
        arrays.clean_accuracy,
        arrays.robust_accuracy,
    )
    assert (streamed.n_forwards, streamed.n_gradients) == (arrays.n_forwards, arrays.n_gradients)
    for name, record in arrays.per_attack.items():
        got = {k: v for k, v in streamed.per_attack[name].items() if k != "seconds"}
        assert got == {k: v for k, v in record.items() if k != "seconds"}, name
    assert [f["name"] for f in streamed.flags] == [f["name"] for f in arrays.flags]
    assert streamed.scale == arrays.scale and streamed.x_adv is None
    assert streamed.points == (arrays.points if points else None)


def test_a_generator_of_uneven_batches_gives_the_result_of_the_arrays(problem):
    model, x, y, arrays = problem
    assert_same(gradkit.evaluate(model, batches(x, y), None, **KW), arrays, points=False)


def test_a_pydataset_and_a_memory_mapped_npy_give_the_result_of_the_arrays(problem, tmp_path):
    model, x, y, arrays = problem

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return -(-N // 10)

        def __getitem__(self, i):
            return x[i * 10 : (i + 1) * 10], y[i * 10 : (i + 1) * 10]

    assert_same(gradkit.evaluate(model, Batches(), None, **KW), arrays)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert _sources.is_stream(mapped) and not _sources.is_stream(x)
    assert_same(gradkit.evaluate(model, mapped, y, **KW), arrays)


@pytest.mark.skipif(
    BACKEND not in ("tensorflow", "torch"), reason="tf.data on TensorFlow, DataLoader on torch"
)
def test_a_framework_pipeline_gives_the_result_of_the_arrays(problem):
    model, x, y, arrays = problem
    if BACKEND == "tensorflow":
        import tensorflow as tf

        source = tf.data.Dataset.from_tensor_slices((x, y)).batch(9)
    else:
        import torch

        source = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=9
        )
    assert_same(gradkit.evaluate(model, source, None, **KW), arrays)


def test_an_interrupted_stream_resumes_at_its_next_block(problem, tmp_path, monkeypatch):
    model, x, y, arrays = problem
    path, run, ran = tmp_path / "state.json", _streaming._run_block, []

    def stopping(suite, model, x, labels, j, *args):
        if j == 2 and not ran.count("stop"):
            ran.append("stop")
            raise KeyboardInterrupt
        ran.append(j)
        return run(suite, model, x, labels, j, *args)

    monkeypatch.setattr(_streaming, "_run_block", stopping)
    with pytest.raises(KeyboardInterrupt):
        gradkit.evaluate(model, batches(x, y), None, state_path=path, **KW)
    resumed = gradkit.evaluate(model, batches(x, y), None, state_path=path, **KW)
    assert ran == [0, 1, "stop", 2, 3]  # blocks 0 and 1 read back, not attacked again
    assert_same(resumed, arrays, points=False)
    other = x.copy()
    other[3, 0] = 0.5 if other[3, 0] != 0.5 else 0.25  # block 0 holds other points now
    with pytest.raises(gradkit.errors.StateMismatchError, match="the points of block 0 differ"):
        gradkit.evaluate(model, batches(other, y), None, state_path=path, **KW)


def test_bad_streams_are_refused_naming_the_argument(problem):
    model, x, y, _ = problem
    with pytest.raises(ValueError, match="`y` must be None when x is a source of"):
        gradkit.evaluate(model, batches(x, y), y, **KW)
    with pytest.raises(ValueError, match="`batch_size` must be an int >= 1 when x is a stream"):
        gradkit.evaluate(model, batches(x, y), None, **{**KW, "batch_size": None})
    with pytest.raises(ValueError, match=r"`x` must be a source whose batches are \(x, y\)"):
        gradkit.evaluate(model, iter([x[:4]]), None, **KW)
    with pytest.raises(ValueError, match="`x` must be a source of at least one point"):
        gradkit.evaluate(model, iter([]), None, **KW)


def test_an_ensemble_with_certificates_streamed_gives_the_result_of_the_arrays(problem):
    model, x, y, _ = problem
    x, y = x[:32], y[:32]  # two whole blocks
    other = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    other.set_weights(
        [np.random.default_rng(2).normal(size=(6, 3)).astype("float32"), np.zeros(3, "float32")]
    )
    ensemble = gradkit.WeightedEnsemble([model, other], [0.7, 0.3])
    kw = {**KW, "attacks": ["fgsm"], "certify": "ibp", "eps": 0.02}
    arrays = gradkit.evaluate(ensemble, x, y, **kw)
    streamed = gradkit.evaluate(ensemble, batches(x, y), None, **kw)
    assert 0 < arrays.certified_accuracy < arrays.clean_accuracy  # some certified, not all
    np.testing.assert_array_equal(streamed.certified, arrays.certified)
    assert [f["name"] for f in streamed.flags] == [f["name"] for f in arrays.flags]
    assert streamed.per_attack == {
        **arrays.per_attack,
        "fgsm": {**arrays.per_attack["fgsm"], "seconds": streamed.per_attack["fgsm"]["seconds"]},
    }
    np.testing.assert_array_equal(streamed.robust, arrays.robust)


def test_a_stream_checked_for_convergence_gives_the_result_of_the_arrays(problem):
    model, x, y, _ = problem
    kw = {**KW, "steps": 1, "check_convergence": True}
    arrays, streamed = gradkit.evaluate(model, x, y, **kw), gradkit.evaluate(model, batches(x, y), None, **kw)
    np.testing.assert_array_equal(streamed.robust, arrays.robust)
    assert streamed.broken_by == arrays.broken_by and "apgd-ce (x2)" in streamed.per_attack
    for name, record in arrays.per_attack.items():  # the reruns' counts and the ascents' loss tails
        got = streamed.per_attack[name]
        assert {k: got[k] for k in ("n_points", "n_broken", "n_gradients")} == {
            k: record[k] for k in ("n_points", "n_broken", "n_gradients")
        }, name
        np.testing.assert_allclose(got.get("loss_tail", 0), record.get("loss_tail", 0), rtol=1e-5)
    assert [f["name"] for f in streamed.flags] == [f["name"] for f in arrays.flags]


def test_a_stream_with_preprocessing_gives_the_result_of_the_arrays(problem):
    model, x, y, _ = problem
    kw = {**KW, "preprocessing": (0.5, 0.25)}  # pixels in [0, 1], the model sees (x - 0.5) / 0.25
    arrays, streamed = gradkit.evaluate(model, x, y, **kw), gradkit.evaluate(model, batches(x, y), None, **kw)
    assert arrays.robust_accuracy < gradkit.evaluate(model, x, y, **KW).robust_accuracy  # eps in pixels
    np.testing.assert_array_equal(streamed.robust, arrays.robust)
    assert streamed.broken_by == arrays.broken_by
