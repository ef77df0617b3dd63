"""JAX's data parallelism through keras.distribution (`gradkit.backend.jax.distribution`): the batch
sharded over the devices gives the single device's gradients, attacks and curves.

The check runs in a subprocess with two simulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=2), since the device count is fixed at JAX start.
"""

import os
import subprocess
import sys

import pytest

from conftest import BACKEND

SCRIPT = r"""
import numpy as np, keras, gradkit, jax
assert len(jax.devices()) == 2, jax.devices()
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.RandomState(0)
x, y = rng.rand(13, 4).astype("float32"), rng.randint(0, 3, 13)
single = gradkit.InputGradient(model, batch_size=5)(x, y)
attack = dict(eps=0.1, eps_step=0.03, steps=3, clip_values=(0, 1), seed=0)
pgd_single = gradkit.pgd(model, x, y, **attack)
curve_single = gradkit.robustness_curve(model, x, y, attack="pgd", epsilons=[0, 0.1, 0.3], steps=3,
                                        clip_values=(0, 1), seed=0)
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
fn = gradkit.InputGradient(model, batch_size=5)
sharded = fn(x, y)
assert np.abs(sharded - single).max() <= 1e-5, np.abs(sharded - single).max()
assert np.abs(gradkit.pgd(model, x, y, **attack) - pgd_single).max() <= 1e-5
curve = gradkit.robustness_curve(model, x, y, attack="pgd", epsilons=[0, 0.1, 0.3], steps=3,
                                 clip_values=(0, 1), seed=0)
assert curve["accuracy"] == curve_single["accuracy"], (curve, curve_single)
xb = gradkit.backend.distribute_batch(keras.ops.convert_to_tensor(x[:6]))
assert len(xb.sharding.device_set) == 2, xb.sharding
print("OK", fn.trace_count)
"""


@pytest.mark.skipif(BACKEND != "jax", reason="keras.distribution data parallelism is JAX-only")
def test_jax_data_parallel_equals_single_device():
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK 1" in done.stdout
