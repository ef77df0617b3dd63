"""`gradkit.from_torch` (`gradkit.gradients._torch_module`, `gradkit.backend.torch.modules.wrap_module`): a
`torch.nn.Module` as a Keras model. On PyTorch, the wrapped module evaluates point for point as the same
network written in Keras with the same weights, from the module or from a state_dict file, and a forward
ending in a softmax is read as probabilities; elsewhere the one-line error, before torch is imported."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

import gradkit
from gradkit.gradients import outputs_are_logits
from helpers import torch_cnn

from conftest import BACKEND

on_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch.nn.Modules run on the PyTorch backend only")
SRC = str(pathlib.Path(gradkit.__file__).resolve().parents[1])
EVAL = dict(eps=0.05, steps=5, n_queries=20, clip_values=(0.0, 1.0), verbose=0)

PROBE = """
import json, sys
import gradkit
try:
    gradkit.from_torch(object(), (1, 8, 8))
except ValueError as err:
    print(json.dumps({"error": str(err), "torch": "torch" in sys.modules}))
"""


@pytest.mark.skipif(BACKEND == "torch", reason="the error is for the other backends")
def test_other_backends_say_in_one_line_that_it_needs_torch_and_import_no_torch():
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=240)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "KERAS_BACKEND=torch" in got["error"] and f"KERAS_BACKEND={BACKEND!r}" in got["error"]
    assert "\n" not in got["error"]
    assert got["torch"] is False


@on_torch
def test_the_model_is_the_module_with_its_parameters_and_an_inferred_output_shape():
    import torch

    net = torch_cnn.torch_cnn()
    model = gradkit.from_torch(net, torch_cnn.INPUT_SHAPE, name="mine")
    x, _ = torch_cnn.data(net)
    assert model.name == "mine" and tuple(model.output.shape) == (None, torch_cnn.N_CLASSES)
    assert net.training  # the forward on zeros ran in eval mode and left the mode as it was
    assert [v.value for v in model.trainable_variables] == list(net.parameters())  # the same objects
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)
    assert outputs_are_logits(model)


@on_torch
def test_evaluates_point_for_point_as_the_keras_twin_from_the_module_and_from_a_state_dict(tmp_path):
    import torch

    net = torch_cnn.torch_cnn()
    x, y = torch_cnn.data(net)
    twin = torch_cnn.keras_twin(net)
    np.testing.assert_allclose(
        twin.predict(x, verbose=0), net(torch.from_numpy(x)).detach().numpy(), atol=1e-6
    )
    path = tmp_path / "net.pt"
    torch.save(net.state_dict(), path)
    fresh = torch_cnn.torch_cnn(seed=1)  # other weights, replaced by the file's
    results = [
        gradkit.evaluate(model, x, y, **EVAL)
        for model in (
            twin,
            gradkit.from_torch(net, (1, 8, 8)),
            gradkit.from_torch(fresh, (1, 8, 8), state_dict=path),
        )
    ]
    expected = results[0]
    assert expected.broken_by.count(None) not in (0, len(y))  # some robust, some broken
    assert expected.broken_by[-1] == "clean" and "apgd-ce" in expected.broken_by
    for got in results[1:]:
        assert got.broken_by == expected.broken_by
        np.testing.assert_array_equal(got.robust, expected.robust)
        assert got.robust_accuracy == expected.robust_accuracy


@on_torch
def test_a_forward_ending_in_softmax_is_read_as_probabilities_and_flagged_as_in_keras():
    import torch

    class SoftmaxNet(torch.nn.Module):  # the softmax in forward, as torch code writes it
        def __init__(self):
            super().__init__()
            self.net = torch_cnn.torch_cnn()

        def forward(self, x):
            return torch.nn.functional.softmax(self.net(x), dim=1)

    module = SoftmaxNet()
    x, y = torch_cnn.data(module.net)
    models = {
        "module": gradkit.from_torch(module, (1, 8, 8)),
        "sequential": gradkit.from_torch(torch.nn.Sequential(module.net, torch.nn.Softmax(dim=1)), (1, 8, 8)),
        "keras softmax": keras.Sequential([torch_cnn.keras_twin(module.net), keras.layers.Softmax()]),
        "logits": gradkit.from_torch(module.net, (1, 8, 8)),
    }
    results = {
        name: gradkit.evaluate(model, x, y, attacks=["apgd-ce"], **EVAL) for name, model in models.items()
    }
    for name, model in models.items():
        flags = [flag["name"] for flag in results[name].flags]
        assert outputs_are_logits(model) is (name == "logits"), name
        # Keras' softmax is removed (the attacks get the logits); a forward's cannot be: its log is used
        assert ("probabilities" in flags) is (name in ("module", "sequential")), name
        assert results[name].broken_by == results["logits"].broken_by, name  # log-softmax = logits - const


@on_torch
def test_bad_arguments_name_the_parameter_before_any_work(tmp_path):
    import torch

    net = torch_cnn.torch_cnn()
    with pytest.raises(
        ValueError, match=r"`input_shape` must be the shape of one input.*\(3, 8, 8\).*channels"
    ):
        gradkit.from_torch(net, (3, 8, 8))
    with pytest.raises(TypeError, match="`input_shape` must be a tuple of ints"):
        gradkit.from_torch(net, 64)
    with pytest.raises(ValueError, match="`input_shape` must be a non-empty tuple of positive ints"):
        gradkit.from_torch(net, (0, 8))
    with pytest.raises(TypeError, match="`module` must be a torch.nn.Module. Received: str"):
        gradkit.from_torch("net.pt", (1, 8, 8))
    other = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
    with pytest.raises(ValueError, match=r"`state_dict` must hold the weights of this module.*Missing key"):
        gradkit.from_torch(other, (1, 8, 8), state_dict=net.state_dict())
    whole = tmp_path / "whole.pt"
    torch.save(net, whole)  # a pickled module, not a state_dict: weights_only refuses it
    with pytest.raises(ValueError, match=r"`state_dict` must be a state_dict file .*weights_only=True"):
        gradkit.from_torch(net, (1, 8, 8), state_dict=str(whole))
    with pytest.raises(ValueError, match=r"`state_dict` must map parameter names to tensors.*'epoch'"):
        gradkit.from_torch(net, (1, 8, 8), state_dict={"epoch": 3})


@on_torch
def test_checkpoints_and_data_parallel_state_dicts_load(tmp_path):
    import torch

    net, fresh = torch_cnn.torch_cnn(), torch_cnn.torch_cnn(seed=1)
    x, _ = torch_cnn.data(net)
    expected = net(torch.from_numpy(x)).detach().numpy()
    prefixed = {f"module.{k}": v for k, v in net.state_dict().items()}
    path = tmp_path / "checkpoint.pth"
    torch.save({"epoch": 3, "model_state_dict": prefixed}, path)
    model = gradkit.from_torch(fresh, (1, 8, 8), state_dict=path)
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)
