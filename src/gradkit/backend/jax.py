"""JAX backend: `jax.jit` over `jax.value_and_grad`, with every variable value passed as an argument."""

import jax
import jax.numpy as jnp

from gradkit.backend._common import bind_all_but_x, quiet_retracing, set_random_seed, stateless_call  # noqa: F401
from gradkit.backend._common import quiet_train_step as plain_train_step  # noqa: F401
from gradkit.backend._common import xla_determinism as enable_determinism  # noqa: F401
from gradkit.backend._jax_connected import check_connected as _check_connected
from gradkit.backend._jax_distribution import batch_multiple, distribute_batch, to_numpy  # noqa: F401
from gradkit.backend._jax_train_step import wrap_train_step  # noqa: F401
from gradkit.backend._norm_values import applied_norms, divide_norms, norm_adder, norm_means  # noqa: F401
from gradkit.backend._search import jax_search as compile_search  # noqa: F401
from gradkit.backend._search import jax_seed_state as seed_state  # noqa: F401
from gradkit.backend._search import jax_uniform as uniform  # noqa: F401
from gradkit.backend._weight_stats import cond, stats_builder  # noqa: F401

ROW_QUANTUM = None  # None: rows are padded to the batch size or the next power of two (traces are costly)
EAGER = False


def variable_values(variables, differentiable=False):
    """The current values of Keras variables as JAX arrays."""
    del differentiable
    return [v.value for v in variables]


def compile_grad(fn, wrt, per_output=False, has_aux=False):
    """Compile `fn(trainable, non_trainable, x, y, sample_weight)` and its gradient w.r.t. `wrt`.

    With `has_aux`, `fn` returns `(loss, aux)` and the call returns `((loss, aux), grads)`.
    """
    argnum = 2 if wrt == "x" else 0

    def traced(*args):
        call.trace_count += 1
        return fn(*args)

    def scalar(*args):
        return fn(*args)[0] if has_aux else fn(*args)

    if per_output:

        def value_and_grad(*args):
            return traced(*args), jax.jacrev(fn, argnums=argnum)(*args)

        compiled = jax.jit(value_and_grad)
    else:
        compiled = jax.jit(jax.value_and_grad(traced, argnums=argnum, has_aux=has_aux))
    checked = set()

    def call(*args):
        signature = jax.tree_util.tree_map(lambda a: (tuple(a.shape), str(a.dtype)), args)
        key = repr(signature)
        if key not in checked:
            _check_connected(scalar, argnum, args)
            checked.add(key)
        return compiled(*args)

    call.trace_count = 0
    return call


def compile_step(objective, update, jit_compile=False):
    """Compile one attack step: `call(trainable, non_trainable, state, fixed) -> state`.

    `objective(trainable, non_trainable, x, y, weights) -> (loss, aux)` is differentiated w.r.t.
    `x = state["x"]` (`y = fixed["y"]`, `weights = fixed["weights"]`), then `update(state, aux, grad,
    fixed)` gives the next state; both run inside one `jax.jit`, so the state stays on the device
    (always XLA: `jit_compile` has no effect).
    """
    del jit_compile

    def step(trainable, non_trainable, state, fixed):
        call.trace_count += 1
        grad_fn = jax.value_and_grad(objective, argnums=2, has_aux=True)
        (_, aux), grad = grad_fn(trainable, non_trainable, state["x"], fixed["y"], fixed["weights"])
        return update(state, aux, grad, fixed)

    compiled = jax.jit(step)
    checked = set()

    def call(trainable, non_trainable, state, fixed):
        key = tuple((tuple(a.shape), str(a.dtype)) for a in jax.tree_util.tree_leaves(state["x"]))
        if key not in checked:
            args = (trainable, non_trainable, state["x"], fixed["y"], fixed["weights"])
            _check_connected(lambda *a: objective(*a)[0], 2, args)
            checked.add(key)
        return compiled(trainable, non_trainable, state, fixed)

    call.trace_count = 0
    return call


def _total(t):
    if t.ndim < 2:
        return jnp.sum(t)
    # A product with ones, the elementwise work fused in, runs on every core; a sum(g * g) on one:
    # measured 1% against 4-5% of a training step of a 1M-weight MLP on 2 CPU cores.
    return jnp.sum(jnp.reshape(t, (-1, t.shape[-1])) @ jnp.ones((t.shape[-1],), jnp.float32))


def _squared_norm(g):
    return _total(jnp.square(jnp.asarray(g, jnp.float32)))


def group_norms(grads, matrix, last):
    """`sqrt(matrix @ [|g_1|^2, ..., |g_n|^2, last])`, float32."""
    squares = [_squared_norm(g) for g in grads] + [jnp.asarray(last, jnp.float32)]
    return jnp.sqrt(matrix @ jnp.stack(squares))


# The per-weight statistics as plain reductions: XLA fuses each elementwise producer into its reduction
# (one pass, nothing written). The product with ones above materializes its input and runs a threaded
# dot per statistic: measured 3.8-4.7 ms against 0.8-2.1 ms for the five statistics of the 1M-weight
# MLP (`benchmarks/bench_norms.py`, "statistics_alone"), under load.
weight_stats = stats_builder(lambda t: jnp.sum(jnp.square(jnp.asarray(t, jnp.float32))), jnp.sum)


def assign_add(variable, value):
    """`variable += value` (a Keras variable; inside a stateless scope, recorded there)."""
    variable.assign_add(value)


add_norms = norm_adder(assign_add)


def values_before_step(model, args, variables):
    """The values of `model.optimizer`'s `variables` before the step `train_step(*args)` (`args[0][2]`)."""
    optimizer_values = args[0][2]
    ids = [id(v) for v in model.optimizer.variables]
    return [optimizer_values[ids.index(id(v))] for v in variables]


def metric_values_before_step(model, args, variables):
    """The values of metric `variables` before the step `train_step(*args)` (`args[0][3]`)."""
    ids = [id(v) for v in model.metrics_variables]
    return [args[0][3][ids.index(id(v))] for v in variables]


def compile_forward(fn):
    """Compile `fn(trainable, non_trainable, x, y, weights)` without a gradient (`jax.jit`)."""

    def traced(*args):
        call.trace_count += 1
        return fn(*args)

    compiled = jax.jit(traced)

    def call(*args):
        return compiled(*args)

    call.trace_count, call.bind = 0, bind_all_but_x(call)
    return call


def input_ascent(forward, loss_of, x, update, steps):
    """`steps` times `x <- update(x, d loss_of(forward(x)) / dx)`, each gradient `jax.grad` w.r.t. `x` of
    `forward` (a pure function of `x`; inside the jitted step it reads the traced variable values); no
    gradient flows back through the result (the adversarial-training inner attack)."""
    grad = jax.grad(lambda z: loss_of(forward(z)))
    x = jax.lax.stop_gradient(x)
    for _ in range(steps):
        x = jax.lax.stop_gradient(update(x, grad(x)))
    return x
