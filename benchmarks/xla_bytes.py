"""Bytes each compiled attack step reads and writes, from XLA's cost analysis (JAX only).

On the near-free model of `bench_device.py` a step streams full-size arrays through memory (the
iterate, the clean input, the gradient, the records) and does little arithmetic, so its time follows
the bytes it moves, and on a shared machine that time moves with the neighbours' use of the memory
bus (the same step measured 8 to 17 ms in runs an hour apart). XLA's count of the bytes a compiled
step accesses does not move: it is a figure of the step's design, printed beside the timed ratios.

Every function `jax.jit` compiles while `capturing()` is open is recorded with its first arguments, then
lowered and compiled once more to read `cost_analysis()["bytes accessed"]`. gradkit's gradient steps are
`backend.compile_step`'s `step`; the hand-written ones are named after their attack (`hand_steps.py`).
The count is XLA's estimate: it takes a conditional's operands whole, whichever branch runs (why
Square's search is not compared).
"""

import contextlib

import jax


@contextlib.contextmanager
def capturing():
    """Within it, `jax.jit` records each function it compiles on its first call: yields a dict
    `{function name: (jitted function, args, kwargs)}` (the first function of each name)."""
    seen, original = {}, jax.jit

    def jit(fun=None, *a, **k):
        if fun is None:  # used as a decorator factory
            return lambda f: jit(f, *a, **k)
        jitted = original(fun, *a, **k)
        name = getattr(fun, "__name__", "?")

        def call(*args, **kw):
            seen.setdefault(name, (jitted, args, kw))
            return jitted(*args, **kw)

        return call

    jax.jit = jit
    try:
        yield seen
    finally:
        jax.jit = original


def bytes_accessed(entry):
    """XLA's count of the bytes one call of a recorded function reads and writes."""
    jitted, args, kw = entry
    cost = jitted.lower(*args, **kw).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["bytes accessed"])


def per_step(attacks, hand_kit):
    """`{attack: MB per step}` of gradkit's steps and the hand-written ones (`hand_<attack>`).

    Args:
        attacks: `{name: fn}`, each running a short gradkit attack on a model whose steps were not yet
            compiled (a fresh clone: a step compiled before `capturing()` is not seen).
        hand_kit: `() -> {name: run(steps)}`, a fresh `hand_steps.jax_kit`.
    """
    out = {}
    for name, fn in attacks.items():
        with capturing() as seen:
            fn()
        out[name] = bytes_accessed(seen["step"]) / 1e6
    with capturing() as seen:
        kit = hand_kit()
        for name in attacks:
            kit[name](1)()
    out.update({f"hand_{name}": bytes_accessed(seen[name]) / 1e6 for name in attacks})
    return out
