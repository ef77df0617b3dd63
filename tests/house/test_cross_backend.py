"""The same weights give the same gradients on TensorFlow, JAX and PyTorch (atol 1e-5).

Each backend runs in its own process (Keras picks its backend once per process); this test runs in
the TensorFlow session of the suite only, and compares the three.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import BACKEND

SCRIPT = r"""
import json, numpy as np, keras, gradkit
rng = np.random.RandomState(0)
def weights(model):
    model.set_weights([(rng.randn(*w.shape) * 0.5).astype("float32") for w in model.get_weights()])
    return model
inp = keras.Input((4,))
g1 = weights(keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(8, activation="relu")(inp))))
g1.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.linspace(-1, 1, 8).reshape(2, 4).astype("float32")
cnn = weights(keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                                keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]))
cnn.compile(loss="sparse_categorical_crossentropy")
xc = rng.rand(6, 8, 8, 1).astype("float32"); yc = rng.randint(0, 10, 6)
ens = gradkit.WeightedEnsemble([g1, weights(keras.models.clone_model(g1))], [0.3, 0.7])
ens.models[1].compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
out = {
    "g1": gradkit.input_gradient(g1, x, [0, 2]).tolist(),
    "cnn": gradkit.input_gradient(cnn, xc, yc).tolist(),
    "ensemble": gradkit.InputGradient(ens)(x, [0, 2]).tolist(),
    "weights": [g.tolist() for g in gradkit.weight_gradients(cnn, xc, yc)],
}
print("RESULT" + json.dumps(out))
"""


def run(backend):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@pytest.mark.skipif(BACKEND != "tensorflow", reason="runs all three backends once, from the TF session")
def test_three_backends_agree():
    results = {b: run(b) for b in ("tensorflow", "jax", "torch")}
    ref = results["tensorflow"]
    for backend in ("jax", "torch"):
        for key in ("g1", "cnn", "ensemble"):
            np.testing.assert_allclose(results[backend][key], ref[key], atol=1e-5, err_msg=f"{backend} {key}")
        for a, b in zip(results[backend]["weights"], ref["weights"]):
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=f"{backend} weights")
    assert np.abs(np.asarray(ref["cnn"])).max() > 0
