"""Attack steps with the state on the device (issue 33): gradkit's PGD, APGD-CE and Square (forward only) step
against the same algorithm written by hand in the backend's own API (`hand_steps.py`: jax.jit;
tf.function, jit_compile both ways and the faster taken; torch eager), and the bare compiled
forward+backward, on a near-free model (Flatten + Dense(10)) and 1,024 CIFAR-shaped inputs (32x32x3 in
[0, 1]), eps so small that every row stays attacked.

gradkit's per-step time is the difference of two attacks of S1 and S2 steps (Square: Q1 and Q2 queries)
divided by the difference (the boundary work, validation and the one read back, cancels out;
`pgd_outside_steps_ms` is what it comes to for PGD); the hand-written steps run as many times on
device-resident arrays. PGD with `keep="last"` is compared with the hand PGD, PGD with its default
`keep="first_success"` with the hand PGD that keeps the same records (`pgd_best`). Also: the numpy
loop this branch replaced (one `AttackGradient` call and the numpy geometry per step, as
the numpy loop did), for the before/after ratio. All timed alternately in one run (`alternating`,
medians); the load average before and after and the min-max spread are recorded.

gradkit runs on the hand steps' batch (`batch_size=1024`, one compiled call a step) for the goal's
ratios; `*_default_batch_over_hand` gives its default batch (256 rows on JAX and TensorFlow: four
calls a step). On TensorFlow the model has Keras' `jit_compile=True`, the choice the faster hand steps
made (XLA), with which gradkit compiles a gradient attack's whole step as one XLA cluster;
`*_without_xla_over_hand` gives the model compiled the default way (on a CPU-only machine Keras' "auto"
means no XLA: the forward and backward on TensorFlow's kernels, only the update an XLA cluster).
"""

import os

import keras
import numpy as np

import gradkit
from gradkit.attacks import geometry
from gradkit.attacks._frame import gradient_for, owner, step_for

from common import alternating

N, SHAPE, EPS, S1, S2, Q1, Q2 = 1024, (32, 32, 3), 1e-4, 2, 12, 20, 120
# PGD's step: eps/2 puts every coordinate on the ball's face by step 2 (the near-free model's gradient
# keeps its sign), so both PGD runs end there and the rounding fix at the boundary (`geometry.inside`,
# whose cost depends on how many coordinates lie on the face) cancels out of the per-step difference,
# as the rest of the boundary does. With eps/4 the 2-step run ended inside the ball and the 12-step one
# on its face: the fix's whole cost (75 ms before this branch made it 13 ms) was counted as 10 steps'.
PGD_STEP = EPS / 2


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _numpy_loop(model, x, y, steps):
    """The loop this branch replaces: one `AttackGradient` call per step, the geometry in numpy."""
    grad = gradient_for(model)
    step = step_for(owner(model), grad, loss=None, objective="loss_sum", targeted=False, output=None,
                    batch_size=None)  # fmt: skip

    def pgd():
        xa = x
        for _ in range(steps):
            _, _, g = step(xa, y, None)
            xa = geometry.project_and_clip(xa + np.float32(PGD_STEP) * np.sign(g), x, EPS, np.inf, (0, 1))

    return pgd


def _hand(w, b, x, y):
    """The hand-written steps of `hand_steps` for this backend: `{name: run(steps)}` (TensorFlow: for
    each attack the faster of `jit_compile` False and True, timed here)."""
    import hand_steps

    side = int(round(np.sqrt(0.8 * SHAPE[0] * SHAPE[1])))  # Square's first window (p_init 0.8)
    name = keras.backend.backend()
    if name != "tensorflow":
        kit = hand_steps.jax_kit if name == "jax" else hand_steps.torch_kit
        return kit(w, b, x, y, EPS, side), {}
    kits = {jit: hand_steps.tf_kit(w, b, x, y, EPS, side, jit_compile=jit) for jit in (False, True)}
    chosen, jit_used = {}, {}
    for attack in ("pgd", "pgd_best", "apgd", "square", "bare"):
        fns = {jit: kits[jit][attack](S2 - S1) for jit in kits}
        for fn in fns.values():
            fn()
        t = alternating(fns, repeats=3)
        jit_used[attack] = min(t, key=t.get)
        chosen[attack] = kits[jit_used[attack]][attack]
    return chosen, jit_used


def _xla_twin(model):
    """`model`'s twin (the same weights) with Keras' `jit_compile=True`: on TensorFlow gradkit then
    compiles each gradient attack step whole under XLA, the choice the hand-written steps made."""
    twin = keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    twin.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    twin.jit_compile = True
    return twin


def run(repeats=5):
    plain = _model()
    tf = keras.backend.backend() == "tensorflow"
    model = _xla_twin(plain) if tf else plain
    rng = np.random.RandomState(0)
    x, y = rng.uniform(size=(N, *SHAPE)).astype(np.float32), rng.randint(0, 10, N)
    w, b = (np.asarray(v) for v in model.get_weights())
    hand, jit_used = _hand(w, b, x, y.astype(np.int32))
    common = dict(eps=EPS, clip_values=(0, 1))

    # The goal's figures run gradkit on the hand steps' batch (all N rows per compiled call); the
    # default batch (256 rows on JAX and TensorFlow: four calls a step) is recorded beside them.
    def pgd(steps, batch_size=N, on=model, **kw):
        return lambda: gradkit.pgd(on, x, y, eps_step=PGD_STEP, steps=steps, random_start=False,
                                   batch_size=batch_size, **common, **kw)  # fmt: skip

    def apgd(steps, batch_size=N, on=model):
        return lambda: gradkit.apgd(on, x, y, steps=steps, seed=0, batch_size=batch_size, **common)

    def square(queries, batch_size=N):
        return lambda: gradkit.square(model, x, y, n_queries=queries, seed=0, batch_size=batch_size, **common)

    per, fns = S2 - S1, {}

    def pair(name, make, lo=S1, hi=S2):  # the two runs whose difference gives the per-step time
        fns[f"{name}_s1"], fns[f"{name}_s2"] = make(lo), make(hi)

    pair("pgd", lambda s: pgd(s, keep="last"))
    pair("pgd_best", pgd)
    pair("apgd", apgd)
    pair("square", square, Q1, Q2)
    pair("pgd_default_batch", lambda s: pgd(s, None, keep="last"))
    pair("apgd_default_batch", lambda s: apgd(s, None))
    pair("square_default_batch", lambda s: square(s, None), Q1, Q2)
    if tf:  # the model compiled the default way (no XLA on a CPU): the update alone is an XLA cluster
        pair("pgd_without_xla", lambda s: pgd(s, on=plain, keep="last"))
        pair("apgd_without_xla", lambda s: apgd(s, on=plain))
    fns.update(hand_pgd=hand["pgd"](per), hand_pgd_best=hand["pgd_best"](per), hand_apgd=hand["apgd"](per),
               hand_square=hand["square"](Q2 - Q1), bare=hand["bare"](per),
               numpy_loop=_numpy_loop(model, x, y.astype(np.int32), per))  # fmt: skip
    for fn in fns.values():
        fn()
    load_before = os.getloadavg()[0]
    t, spread = alternating(fns, repeats=repeats, spread=True)
    gradient = ("pgd", "pgd_best", "apgd", "pgd_default_batch", "apgd_default_batch")
    gradient += ("pgd_without_xla", "apgd_without_xla") if tf else ()
    ms = {name: (t[f"{name}_s2"] - t[f"{name}_s1"]) / per for name in gradient}
    for name in ("square", "square_default_batch"):
        ms[name] = (t[f"{name}_s2"] - t[f"{name}_s1"]) / (Q2 - Q1)
    ms.update(
        {name: t[name] / per for name in ("hand_pgd", "hand_pgd_best", "hand_apgd", "bare", "numpy_loop")}
    )
    ms["hand_square"] = t["hand_square"] / (Q2 - Q1)
    out = {f"{k}_step_ms": 1e3 * v for k, v in ms.items()}
    hand_of = {"pgd": "hand_pgd", "apgd": "hand_apgd", "square": "hand_square"}
    variants = [
        (a, kind) for a in hand_of for kind in ("default_batch", "without_xla") if f"{a}_{kind}" in ms
    ]
    extra = {f"{a}_{kind}_over_hand": ms[f"{a}_{kind}"] / ms[hand_of[a]] for a, kind in variants}
    out.update(
        pgd_over_hand=ms["pgd"] / ms["hand_pgd"],
        pgd_first_success_over_hand=ms["pgd_best"] / ms["hand_pgd_best"],
        pgd_outside_steps_ms=1e3 * (t["pgd_s1"] - S1 * ms["pgd"]),
        apgd_ce_over_hand=ms["apgd"] / ms["hand_apgd"],
        square_over_hand=ms["square"] / ms["hand_square"],
        apgd_ce_over_bare=ms["apgd"] / ms["bare"],
        pgd_over_bare=ms["pgd"] / ms["bare"],
        numpy_loop_over_pgd=ms["numpy_loop"] / ms["pgd"],
        **extra,
        tf_jit_compile_chosen=jit_used,
        spread_max_over_min=spread,
        load_average=[load_before, os.getloadavg()[0]],
        repeats=repeats,
        setup=(f"Flatten+Dense(10), {N}x32x32x3, eps {EPS}, per step from {S1}- and {S2}-step attacks "
               f"(Square: {Q1} and {Q2} queries; PGD step eps/2), gradkit at batch_size={N} as the hand "
               "steps (*_default_batch: gradkit's default), TensorFlow's model with jit_compile=True "
               "(*_without_xla: compiled the default way), hand-written steps in hand_steps.py "
               "(PGD first success against the hand PGD with the same records)"),
    )  # fmt: skip
    if keras.backend.backend() == "jax":  # bytes per step, a figure the machine's load does not move
        out.update(_bytes(model, x, y, w, b))
    return {"device_steps": out}


def _bytes(model, x, y, w, b):
    """XLA's bytes accessed per step (`xla_bytes.py`) of the gradient attacks, gradkit's steps on a fresh
    clone of `model` (its own compiled steps) against the hand-written ones, and their ratios. Square is
    left out: its search sums the window in a conditional (a patch or the whole image, `window_sums`),
    and XLA counts a conditional's operands whole."""
    import hand_steps
    import xla_bytes

    clone = _xla_twin(model)  # the same weights, steps not yet compiled
    common = dict(eps=EPS, clip_values=(0, 1), batch_size=N)
    attacks = dict(  # not Square: XLA counts its conditional's operands whole (see the docstring)
        pgd=lambda: gradkit.pgd(clone, x, y, eps_step=PGD_STEP, steps=1, random_start=False, keep="last",
                                **common),
        pgd_best=lambda: gradkit.pgd(clone, x, y, eps_step=PGD_STEP, steps=1, random_start=False, **common),
        apgd=lambda: gradkit.apgd(clone, x, y, steps=1, seed=0, **common),
    )  # fmt: skip
    side = int(round(np.sqrt(0.8 * SHAPE[0] * SHAPE[1])))
    mb = xla_bytes.per_step(attacks, lambda: hand_steps.jax_kit(w, b, x, y.astype(np.int32), EPS, side))
    return {
        "bytes_per_step_mb": mb,
        **{f"{name}_bytes_over_hand": mb[name] / mb[f"hand_{name}"] for name in attacks},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
