"""Interval bound propagation (IBP): a box around every value of the network, layer by layer.

An affine layer maps the box with center mu and radius r to center L(mu) and radius |L|(r); a monotone
activation or max-pooling maps the ends, `[f(lo), f(up)]`; an Add sums the ends. The last affine layer is
folded into the margins z_y - z_j ("elision", Gowal et al. 2018, sec. 3): the margin is a linear function
of that layer's input, bounded over its box at once instead of through two separate logit intervals.
Where that input is the model's input, the bound is exact for the norm (the dual-norm form, `_sets`).

Every value is kept flat, `(n, d)` in row-major order; a layer runs on it reshaped to its input shape.

Reference: Gowal, Dvijotham, Stanforth, Bunel, Qin, Uesato, Arandjelovic, Mann & Kohli (2018), "On the
effectiveness of interval bound propagation for training verifiably robust models",
https://arxiv.org/abs/1810.12715, equations (5)-(6) and sec. 3 (elision of the last layer).
"""

from keras import ops

from gradkit.certificates import _sets


def flat(a):
    """`a` `(n, ...)` as `(n, d)`."""
    return ops.reshape(a, (ops.shape(a)[0], -1))


def run(fn, a, shape):
    """`fn` on the flat `a` reshaped to the per-sample `shape`; the result flat."""
    return flat(fn(ops.reshape(a, (ops.shape(a)[0],) + tuple(shape))))


def affine_matrix(step, plan):
    """`(W, b)` of an affine step, `W` float `(d_in, d_out)` and `b` `(d_out,)`: the layer applied to the
    basis vectors of its input (its Jacobian, exact for an affine map) and to zero."""
    shape = plan.shapes[step.inputs[0]]
    d = 1
    for s in shape:
        d *= int(s)
    basis = ops.concatenate([ops.zeros((1, d)), ops.eye(d)], axis=0)
    out = run(step.apply, basis, shape)
    return out[1:] - out[:1], out[0]


def _affine(step, plan, lo, up, box):
    mu, r = (lo + up) / 2.0, (up - lo) / 2.0
    shape = plan.shapes[step.inputs[0]]
    center, radius = run(step.apply, mu, shape), run(step.apply_abs, r, shape)
    low, high = center - radius, center + radius
    if step.inputs[0] == plan.input and box[4] == 2:  # the ball's own bound of the first layer
        w, b = affine_matrix(step, plan)
        a = ops.expand_dims(ops.transpose(w), 0)
        ball_low = _sets.lower_linear(ops.broadcast_to(a, (ops.shape(lo)[0],) + a.shape[1:]), b, box)
        ball_high = -_sets.lower_linear(-ops.broadcast_to(a, (ops.shape(lo)[0],) + a.shape[1:]), -b, box)
        low, high = ops.maximum(low, ball_low), ops.minimum(high, ball_high)
    return low, high


def step_bounds(step, plan, bounds, box):
    """`(lo, up)` flat bounds of `step`'s output from the `bounds` of its inputs."""
    lo, up = bounds[step.inputs[0]]
    if step.kind == "affine":
        return _affine(step, plan, lo, up, box)
    if step.kind == "identity":
        return lo, up
    if step.kind == "add":
        pairs = [bounds[i] for i in step.inputs]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    shape = plan.shapes[step.inputs[0]]  # activation, maxpool: monotone non-decreasing
    return run(step.apply, lo, shape), run(step.apply, up, shape)


def propagate(plan, box):
    """`{value id: (lo, up)}` flat bounds of every value of the plan."""
    bounds = {plan.input: _sets.interval(box)}
    for step in plan.steps:
        bounds[step.output] = step_bounds(step, plan, bounds, box)
    return bounds


def lower_spec(plan, bounds, spec, box):
    """The lower bound of `spec . z` for the logits z, float `(n, S)`, from IBP `bounds`, the last
    affine layer folded in when the logits come from one (elision). `spec`: float `(n, S, K)`."""
    last = plan.steps[-1] if plan.steps else None
    if last is None or last.kind != "affine" or last.output != plan.output:
        lo, up = bounds[plan.output]
        return ops.einsum("nsk,nk->ns", ops.maximum(spec, 0.0), lo) + ops.einsum(
            "nsk,nk->ns", ops.minimum(spec, 0.0), up
        )
    w, b = affine_matrix(last, plan)
    a = ops.einsum("nsk,ik->nsi", spec, w)
    const = ops.einsum("nsk,k->ns", spec, b)
    if last.inputs[0] == plan.input:
        return _sets.lower_linear(a, const, box)
    lo, up = bounds[last.inputs[0]]
    return _sets.lower_linear(a, const, (lo, lo, up, None, float("inf")))
