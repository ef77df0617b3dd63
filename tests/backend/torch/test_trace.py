"""PyTorch's per-signature TorchScript traces (`gradkit.backend.torch.trace`): exact or not used.

A trace replays the torch operations of one call; these tests check that it gives the eager values and
gradients, that a trace which froze a value-dependent branch or a random draw is refused, and that
attacks give the same examples with and without traces.
"""

import keras
import numpy as np
import pytest

import gradkit

# gradients' private cache: the seam that reaches the compiled steps whose traces served the calls
from gradkit.gradients._cache import cached_values

pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch's traces only")

if keras.backend.backend() == "torch":
    import torch

    from gradkit.backend.torch import trace as _torch_trace


def _cnn(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(5)])  # fmt: skip
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _stateless(model):
    def fn(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x)[0]

    return fn


def _values(model):
    return [v.value.detach() for v in model.trainable_variables], []


def test_trace_gives_the_eager_values_and_gradients():
    model, rng = _cnn(), np.random.default_rng(0)
    traced = _torch_trace.Traced(_stateless(model))
    x = torch.from_numpy(rng.uniform(size=(16, 8, 8, 1)).astype("float32"))
    trainable, non_trainable = _values(model)
    traced("k", trainable, non_trainable, x)  # the first call runs eagerly and traces
    assert (traced.n_traced, traced.n_eager) == (1, 0)
    for _ in range(3):  # later calls replay the trace; new values of the same signature
        x2 = torch.from_numpy(rng.uniform(size=(16, 8, 8, 1)).astype("float32")).requires_grad_(True)
        out = traced("k", trainable, non_trainable, x2)
        (grad,) = torch.autograd.grad(out[:, 1].sum(), x2)
        x3 = x2.detach().clone().requires_grad_(True)
        expected = model(x3)
        (expected_grad,) = torch.autograd.grad(expected[:, 1].sum(), x3)
        np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), rtol=1e-5, atol=1e-7)
    new_weights = [w * 2 for w in trainable]  # the variables are inputs of the trace, not constants
    np.testing.assert_allclose(
        traced("k", new_weights, non_trainable, x).numpy(),
        model.stateless_call(new_weights, non_trainable, x)[0].detach().numpy(), rtol=1e-5, atol=1e-6,
    )  # fmt: skip


def test_a_value_dependent_branch_is_refused_and_runs_eagerly():
    def fn(x):  # the branch taken depends on the first row: a trace would freeze it
        return x * 2.0 if float(x[0, 0]) > 0.5 else x * 3.0

    traced = _torch_trace.Traced(fn)
    x = torch.tensor([[0.9, 0.0], [0.1, 0.0], [0.2, 0.0]])
    np.testing.assert_allclose(traced("k", x).numpy(), (x * 2).numpy())
    assert (traced.n_traced, traced.n_eager) == (0, 1)
    other = torch.tensor([[0.1, 0.0], [0.9, 0.0], [0.2, 0.0]])
    np.testing.assert_allclose(traced("k", other).numpy(), (other * 3).numpy())  # eager: right branch


def test_a_random_forward_pass_is_refused():
    generator = keras.random.SeedGenerator(0)

    def fn(x):
        return x + keras.random.normal(tuple(x.shape), seed=generator)

    traced = _torch_trace.Traced(fn)
    x = torch.zeros((4, 3))
    first, second = traced("k", x), traced("k", x)
    assert (traced.n_traced, traced.n_eager) == (0, 1)
    assert not torch.allclose(first, second)  # still random: not frozen into a trace


def test_tracing_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(_torch_trace, "ENABLED", False)
    traced = _torch_trace.Traced(lambda x: x * 2)
    traced("k", torch.ones(3))
    traced("k", torch.ones(3))
    assert (traced.n_traced, traced.n_eager) == (0, 1)


def test_flatten_and_pack_are_inverse_in_keras_order():
    structure = ([1, 2], {"b": 3, "a": (4, 5)}, 6)
    leaves = _torch_trace.flatten(structure)
    assert leaves == keras.tree.flatten(structure) == [1, 2, 4, 5, 3, 6]
    assert _torch_trace.pack(structure, [x * 10 for x in leaves]) == ([10, 20], {"a": (40, 50), "b": 30}, 60)


@pytest.mark.parametrize("attack", ["square", "apgd-t"])
def test_attacks_give_the_same_examples_with_and_without_traces(monkeypatch, attack):
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(40, 8, 8, 1)).astype("float32")
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(_torch_trace, "ENABLED", enabled)
        model = _cnn(3)  # a new model: its compiled functions are new
        y = np.argmax(model.predict(x, verbose=0), axis=1)
        if attack == "square":
            adv = gradkit.square(model, x, y, eps=0.2, n_queries=60, clip_values=(0, 1), seed=0)
        else:
            adv = gradkit.apgd(model, x, y, eps=0.2, steps=10, loss="dlr", targeted=True, n_target_classes=3,
                               clip_values=(0, 1), seed=0)  # fmt: skip
        objectives = cached_values(model, "attack")
        # both run on the engine: the compiled step (APGD: its traced gradient; Square: its traced forward
        # pass) serves the calls
        served = [f for fn in objectives for f in getattr(fn._fn, "steps", {}).values()]
        assert served and all(f.trace_count >= 1 for f in served)
        assert all((f.traced.n_traced > 0) == enabled for f in served)  # the traces served the calls
        results.append((adv, np.mean(np.argmax(model.predict(adv, verbose=0), axis=1) != y)))
    np.testing.assert_allclose(results[0][0], results[1][0], atol=1e-6)
    assert results[0][1] == results[1][1] > 0
