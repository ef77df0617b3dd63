"""The attack steps of `bench_device.py` written by hand in each backend's own API, their state on the device.

One algorithm per attack, written once over a numpy-like namespace `xp` (`jax.numpy`,
`tf.experimental.numpy`, `torch`) with the backend's own gradient, forward pass and random draws:

- PGD (Linf): the gradient, a signed step of eps/2 (bench_device's PGD step), projection onto the
  eps-ball and the clip.
- PGD with records (gradkit's default `keep="first_success"`): the same step, and at each iterate the
  decision from the logits the gradient call returns, the first-success flag and the best point (the
  first iterate that fooled the model, else the one of highest loss) with its loss.
- APGD-CE (Linf): the gradient with per-row loss and logits, best point and first success records, a
  projected step of size eta per row, the momentum mix (0.75) and its projection. The checkpoint
  rule, a few reads in a whole run, is left out; the best point's gradient, which the rule restores,
  is recorded at every step, as AutoAttack's APGD records `grad_best` (full precision, as there).
- Square (Linf, forward only): a random window per row (a fixed side: the schedule's first) set to
  x0 +- eps with random signs per channel, the forward pass, the margin, keep-if-better and the
  success flags.

Each `kit(w, b, x, y, eps)` returns `{"pgd": run(steps), "apgd": ..., "square": ..., "bare": ...}`;
`run(steps)` gives a callable that runs `steps` compiled steps from the clean input and waits for the
device. Framework code is allowed here (benchmarks only).
"""

import numpy as np

N_CLASSES = 10


def _algorithms(xp, grad, forward, uniform, eps, side):
    """The three steps over `xp`; `grad(x) -> (per-row CE, logits, gradient)`, `forward(x) -> logits`,
    `uniform(key, shape) -> (sample, key)`."""

    def project(xa, x0):
        return xp.clip(xp.clip(xa - x0, -eps, eps) + x0, 0.0, 1.0)

    def pgd(xa, x0, y):
        return project(xa + eps / 2 * xp.sign(grad(xa, y)[2]), x0)

    def pgd_best(state, x0, y):
        xa, best_x, best_v, success = state
        v, z, g = grad(xa, y)
        hit = xp.argmax(z, axis=1) != y
        first = xp.logical_and(hit, xp.logical_not(success))
        higher = xp.logical_and(xp.logical_not(xp.logical_or(success, hit)), v > best_v)
        take = xp.logical_or(first, higher)
        best_x = xp.where(take[:, None, None, None], xa, best_x)
        moved = project(xa + eps / 2 * xp.sign(g), x0)
        return moved, best_x, xp.where(take, v, best_v), xp.logical_or(success, hit)

    def apgd(state, x0, y):
        xa, x_prev, best_x, best_g, best_v, eta, adv, success = state
        v, z, g = grad(xa, y)
        better = v > best_v
        best_x = xp.where(better[:, None, None, None], xa, best_x)
        best_g = xp.where(better[:, None, None, None], g, best_g)
        hit = xp.logical_and(xp.argmax(z, axis=1) != y, xp.logical_not(success))
        adv = xp.where(hit[:, None, None, None], xa, adv)
        s = project(xa + eta[:, None, None, None] * xp.sign(g), x0)
        new = project(xa + 0.75 * (s - xa) + 0.25 * (xa - x_prev), x0)
        return new, xa, best_x, best_g, xp.where(better, v, best_v), eta, adv, xp.logical_or(success, hit)

    def square(state, x0, y, plus, minus, onehot):
        best, best_v, active, key = state
        n, h, w, c = best.shape
        u, key = uniform(key, (n, 2 + c))
        top, left = xp.floor(u[:, 0] * (h - side + 1)), xp.floor(u[:, 1] * (w - side + 1))
        rows = xp.arange(h, dtype=u.dtype)[None, :] - top[:, None]
        cols = xp.arange(w, dtype=u.dtype)[None, :] - left[:, None]
        in_rows, in_cols = xp.logical_and(rows >= 0, rows < side), xp.logical_and(cols >= 0, cols < side)
        mask = xp.logical_and(in_rows[:, :, None], in_cols[:, None, :])[..., None]
        signs = (u[:, 2:] < 0.5)[:, None, None, :]
        cand = xp.where(mask, xp.where(signs, plus, minus), best)
        z = forward(cand)
        margin = xp.amax(xp.where(onehot, -1e9, z), axis=1) - xp.sum(xp.where(onehot, z, 0.0), axis=1)
        hit = xp.argmax(z, axis=1) != y
        keep = xp.logical_and(active, xp.logical_or(margin > best_v, hit))
        best = xp.where(keep[:, None, None, None], cand, best)
        best_v = xp.where(keep, margin, best_v)
        return best, best_v, xp.logical_and(active, xp.logical_not(hit)), key

    return pgd, pgd_best, apgd, square


def _runs(compile_, sync, pgd, pgd_best, apgd, square, bare, x0, y, extra, key0, n):
    """`run(steps)` callables for the compiled steps, from the clean input; each waits for the device."""
    fns = dict(pgd=pgd, pgd_best=pgd_best, apgd=apgd, square=square, bare=bare)
    steps = {name: compile_(fn) for name, fn in fns.items()}
    zeros, false, inf = extra["zeros"], extra["false"], extra["neg_inf"]

    def loop(name, make, advance):
        def run(k):
            def go():
                state = make()
                for _ in range(k):
                    state = advance(state)
                sync(state)

            return go

        return run

    return {
        "pgd": loop("pgd", lambda: x0, lambda s: steps["pgd"](s, x0, y)),
        "pgd_best": loop("pgd_best", lambda: (x0, x0, inf, false), lambda s: steps["pgd_best"](s, x0, y)),
        "apgd": loop(
            "apgd",
            lambda: (x0, x0, x0, extra["grad0"], inf, extra["eta"], x0, false),
            lambda s: steps["apgd"](s, x0, y),
        ),  # fmt: skip
        "square": loop(
            "square",
            lambda: (x0, inf, extra["true"], key0),
            lambda s: steps["square"](s, x0, y, extra["plus"], extra["minus"], extra["onehot"]),
        ),  # fmt: skip
        "bare": loop("bare", lambda: zeros, lambda s: steps["bare"](x0, y)),
    }


def _extra(x, y, eps, to_dev):
    n = len(x)
    return dict(
        zeros=to_dev(np.zeros(1, np.float32)), grad0=to_dev(np.zeros_like(x)),
        false=to_dev(np.zeros(n, bool)), true=to_dev(np.ones(n, bool)),
        neg_inf=to_dev(np.full(n, -np.inf, np.float32)), eta=to_dev(np.full(n, 2 * eps, np.float32)),
        plus=to_dev(np.clip(x + eps, 0, 1)), minus=to_dev(np.clip(x - eps, 0, 1)),
        onehot=to_dev(np.eye(N_CLASSES, dtype=bool)[y]),
    )  # fmt: skip


def jax_kit(w, b, x, y, eps, side):
    import jax
    import jax.numpy as jnp

    w, b = jnp.asarray(w), jnp.asarray(b)

    def forward(xa):
        return jnp.reshape(xa, (xa.shape[0], -1)) @ w + b

    def rows(xa, yy):
        z = forward(xa)
        ce = -jnp.take_along_axis(jax.nn.log_softmax(z), yy[:, None], axis=1)[:, 0]
        return jnp.sum(ce), (ce, z)

    def grad(xa, yy):
        (_, (ce, z)), g = jax.value_and_grad(rows, has_aux=True)(xa, yy)
        return ce, z, g

    def uniform(key, shape):
        key, sub = jax.random.split(key)
        return jax.random.uniform(sub, shape), key

    algos = _algorithms(jnp, grad, forward, uniform, eps, side)
    to_dev = jnp.asarray
    return _runs(jax.jit, jax.block_until_ready, *algos, lambda xa, yy: grad(xa, yy)[2], to_dev(x),
                 to_dev(y), _extra(x, y, eps, to_dev), jax.random.PRNGKey(0), len(x))  # fmt: skip


def tf_kit(w, b, x, y, eps, side, jit_compile=False):
    import tensorflow as tf
    import tensorflow.experimental.numpy as tnp

    w, b = tf.constant(w), tf.constant(b)

    def forward(xa):
        return tf.reshape(xa, (tf.shape(xa)[0], -1)) @ w + b

    def grad(xa, yy):
        with tf.GradientTape() as tape:
            tape.watch(xa)
            z = forward(xa)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(yy, z)
            loss = tf.reduce_sum(ce)
        return ce, z, tape.gradient(loss, xa)

    def uniform(key, shape):
        return tf.random.stateless_uniform(shape, seed=key), key + tf.constant([0, 1], tf.int32)

    algos = _algorithms(tnp, grad, forward, uniform, eps, side)

    def compile_(fn):
        return tf.function(fn, jit_compile=jit_compile)

    def sync(state):
        tf.nest.map_structure(lambda t: t.numpy(), state)

    to_dev, yt = tf.constant, tf.constant(y.astype(np.int64))
    return _runs(compile_, sync, *algos, lambda xa, yy: grad(xa, yy)[2], to_dev(x), yt,
                 _extra(x, y, eps, to_dev), tf.constant([0, 0], tf.int32), len(x))  # fmt: skip


def torch_kit(w, b, x, y, eps, side):
    import torch

    w, b = torch.as_tensor(w), torch.as_tensor(b)

    def forward(xa):
        return xa.reshape(xa.shape[0], -1) @ w + b

    def grad(xa, yy):
        xa = xa.detach().requires_grad_(True)
        with torch.enable_grad():
            z = forward(xa)
            ce = torch.nn.functional.cross_entropy(z, yy, reduction="none")
            (g,) = torch.autograd.grad(ce.sum(), xa)
        return ce.detach(), z.detach(), g

    generator = torch.Generator().manual_seed(0)

    def uniform(key, shape):
        return torch.rand(shape, generator=key), key

    algos = _algorithms(torch, grad, forward, uniform, eps, side)

    def compile_(fn):  # eager (torch.compile measured slower on CPU, KERAS3_NOTES)
        def call(*args):
            with torch.no_grad():
                return fn(*args)

        return call

    yt = torch.as_tensor(y.astype(np.int64))
    return _runs(compile_, lambda s: None, *algos, lambda xa, yy: grad(xa, yy)[2], torch.as_tensor(x), yt,
                 _extra(x, y, eps, torch.as_tensor), generator, len(x))  # fmt: skip
