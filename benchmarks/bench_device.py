"""Attack steps with the state on the device (issue 33): gradkit's PGD and APGD-CE step against the same PGD
step written by hand in the backend's own API (jax.jit; tf.function, with jit_compile where faster; torch
eager), and the bare compiled forward+backward, on a near-free model (Flatten + Dense(10)) and 1,024
CIFAR-shaped inputs (32x32x3 in [0, 1]), eps so small that every row stays attacked.

gradkit's per-step time is the difference of two attacks of S1 and S2 steps divided by S2 - S1 (the
boundary work, validation and the one read back, cancels out); the hand-written steps run S2 - S1 times
on device-resident arrays. Also: the numpy loop this branch replaces (one `AttackGradient` call and the
numpy geometry per step, as `attacks/_loop.py` did), for the before/after ratio. All timed alternately
in one run (`alternating`); the load average before and after and the min-max spread are recorded.
"""

import os

import keras
import numpy as np

import gradkit
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._prepare import gradient_for, owner, step_for

from common import alternating

N, SHAPE, EPS, S1, S2 = 1024, (32, 32, 3), 1e-4, 2, 12


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _hand_jax(w, b, x, y, steps):
    import jax
    import jax.numpy as jnp

    def loss(xa):
        z = xa.reshape(len(xa), -1) @ w + b
        return -jnp.sum(jax.nn.log_softmax(z)[jnp.arange(len(xa)), y])

    @jax.jit
    def step(xa, x0):
        g = jax.grad(loss)(xa)
        return jnp.clip(jnp.clip(xa + EPS / 4 * jnp.sign(g) - x0, -EPS, EPS) + x0, 0.0, 1.0)

    fwd_bwd = jax.jit(jax.value_and_grad(loss))
    x0 = jnp.asarray(x)
    jax.block_until_ready(step(x0, x0))
    jax.block_until_ready(fwd_bwd(x0))

    def pgd():
        xa = x0
        for _ in range(steps):
            xa = step(xa, x0)
        jax.block_until_ready(xa)

    def bare():
        for _ in range(steps):
            out = fwd_bwd(x0)
        jax.block_until_ready(out)

    return pgd, bare


def _hand_tf(w, b, x, y, steps):
    import tensorflow as tf

    w, b, x0, y = tf.constant(w), tf.constant(b), tf.constant(x), tf.constant(y)

    def grad(xa):
        with tf.GradientTape() as tape:
            tape.watch(xa)
            z = tf.reshape(xa, (N, -1)) @ w + b
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z))
        return loss, tape.gradient(loss, xa)

    def make(jit):
        @tf.function(jit_compile=jit)
        def step(xa):
            g = grad(xa)[1]
            return tf.clip_by_value(
                tf.clip_by_value(xa + EPS / 4 * tf.sign(g) - x0, -EPS, EPS) + x0, 0.0, 1.0
            )

        step(x0)
        return step

    steps_fns = {jit: make(jit) for jit in (False, True)}
    fwd_bwd = tf.function(grad)
    fwd_bwd(x0)

    def pgd_with(step):
        def pgd():
            xa = x0
            for _ in range(steps):
                xa = step(xa)
            xa.numpy()

        return pgd

    def bare():
        for _ in range(steps):
            out = fwd_bwd(x0)
        out[1].numpy()

    pgds = {jit: pgd_with(fn) for jit, fn in steps_fns.items()}
    t = alternating(pgds, repeats=3)
    return pgds[min(t, key=t.get)], bare


def _hand_torch(w, b, x, y, steps):
    import torch

    w, b, x0, y = (torch.as_tensor(a) for a in (w, b, x, y.astype(np.int64)))

    def grad(xa):
        xa = xa.detach().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(xa.reshape(N, -1) @ w + b, y, reduction="sum")
        return torch.autograd.grad(loss, xa)[0]

    def pgd():
        xa = x0
        for _ in range(steps):
            g = grad(xa)
            with torch.no_grad():
                xa = torch.clamp(torch.clamp(xa + EPS / 4 * torch.sign(g) - x0, -EPS, EPS) + x0, 0.0, 1.0)

    def bare():
        for _ in range(steps):
            grad(x0)

    return pgd, bare


def _numpy_loop(model, x, y, steps):
    """The loop this branch replaces: one `AttackGradient` call per step, the geometry in numpy."""
    grad = gradient_for(model)
    step = step_for(owner(model), grad, loss=None, objective="loss_sum", targeted=False, output=None,
                    batch_size=None)  # fmt: skip

    def pgd():
        xa = x
        for _ in range(steps):
            _, _, g = step(xa, y, None)
            xa = geometry.project_and_clip(xa + np.float32(EPS / 4) * np.sign(g), x, EPS, np.inf, (0, 1))

    return pgd


def run(repeats=5):
    model = _model()
    rng = np.random.RandomState(0)
    x, y = rng.uniform(size=(N, *SHAPE)).astype(np.float32), rng.randint(0, 10, N)
    w, b = (np.asarray(v) for v in model.get_weights())
    hand = {"jax": _hand_jax, "tensorflow": _hand_tf, "torch": _hand_torch}[keras.backend.backend()]
    hand_pgd, bare = hand(w, b, x, y.astype(np.int32), S2 - S1)

    def pgd(steps, **kw):
        return lambda: gradkit.pgd(model, x, y, eps=EPS, eps_step=EPS / 4, steps=steps, clip_values=(0, 1),
                                   random_start=False, **kw)  # fmt: skip

    def apgd(steps):
        return lambda: gradkit.apgd(model, x, y, eps=EPS, steps=steps, clip_values=(0, 1), seed=0)

    fns = {"pgd_s1": pgd(S1, keep="last"), "pgd_s2": pgd(S2, keep="last"), "pgd_best_s1": pgd(S1),
           "pgd_best_s2": pgd(S2), "apgd_s1": apgd(S1), "apgd_s2": apgd(S2), "hand_pgd": hand_pgd,
           "bare": bare, "numpy_loop": _numpy_loop(model, x, y.astype(np.int32), S2 - S1)}  # fmt: skip
    for fn in fns.values():
        fn()
    load_before = os.getloadavg()[0]
    t, spread = alternating(fns, repeats=repeats, spread=True)
    per = S2 - S1
    ms = {name: (t[f"{name}_s2"] - t[f"{name}_s1"]) / per for name in ("pgd", "pgd_best", "apgd")}
    ms.update({name: t[name] / per for name in ("hand_pgd", "bare", "numpy_loop")})
    out = {f"{k}_step_ms": 1e3 * v for k, v in ms.items()}
    out.update(
        pgd_over_hand=ms["pgd"] / ms["hand_pgd"],
        pgd_first_success_over_hand=ms["pgd_best"] / ms["hand_pgd"],
        apgd_ce_over_bare=ms["apgd"] / ms["bare"],
        pgd_over_bare=ms["pgd"] / ms["bare"],
        numpy_loop_over_pgd=ms["numpy_loop"] / ms["pgd"],
        spread_max_over_min=spread,
        load_average=[load_before, os.getloadavg()[0]],
        setup=f"Flatten+Dense(10), {N}x32x32x3, eps {EPS}, per step from {S1}- and {S2}-step attacks",
    )
    return {"device_steps": out}


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
