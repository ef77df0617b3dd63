"""CROWN: linear bounds propagated backwards from the margins to the input (Zhang et al. 2018).

For a linear function `Lambda . z_k` of some value z_k, one step back replaces z_k by its layer's input:
an affine layer exactly (`Lambda W^T`, plus `Lambda b`), an activation by a line below or above it on the
input's interval `[lo, up]` (below where the coefficient is >= 0, above where it is < 0), so that the bound
stays a lower bound; at the input the linear function is bounded over the input set (`_sets`). The upper
bound of `Lambda . z` is minus the lower bound of `-Lambda . z`, so one pass computes both.

Relaxations on `[lo, up]`, lo < 0 < up (a neuron of fixed sign is linear):
    ReLU        above: the chord up (z - lo) / (up - lo); below: z if up >= -lo, else 0 (adaptive)
    LeakyReLU   the same with the slope `a`: chord through (lo, a lo), (up, up); below: z or a z
    monotone    (sigmoid, tanh, elu, ...): the constant lines f(lo) below and f(up) above
    max-pool    below: the input with the largest lower bound in the window; above: that input where its
                lower bound exceeds every other upper bound in the window, else the window's largest upper
                bound (the DeepPoly rule)

The intermediate bounds `[lo, up]` an activation needs are CROWN's own (a backward pass from its input, with
one linear function per neuron), intersected with IBP's, so CROWN's bounds are never looser than IBP's.

References:
    Zhang, Weng, Chen, Hsieh & Daniel (2018), "Efficient neural network robustness certification with
    general activation functions", NeurIPS, https://arxiv.org/abs/1811.00866 (Theorem 3.2; sec. 3.3).
    Singh, Gehr, Puschel & Vechev (2019), "An abstract domain for certifying neural networks" (DeepPoly),
    POPL, https://doi.org/10.1145/3290354 (the max-pool rule).
"""

import numpy as np
from keras import ops

from gradkit.certificates import _sets, ibp

_NONLINEAR = ("activation", "maxpool")


def relaxation(step, lo, up):
    """`(a_low, b_low, a_up, b_up)`, float `(n, d)` each: `a_low z + b_low <= f(z) <= a_up z + b_up` on
    `[lo, up]` for the activation `step`."""
    if step.relax == "linear":
        one, zero = ops.ones_like(lo), ops.zeros_like(lo)
        return one, zero, one, zero
    if step.relax == "monotone":
        zero = ops.zeros_like(lo)
        return zero, ibp.run(step.apply, lo, (-1,)), zero, ibp.run(step.apply, up, (-1,))
    a = step.slope  # relu: 0
    mixed = ops.logical_and(lo < 0, up > 0)
    width = ops.where(mixed, up - lo, 1.0)
    chord = ops.where(mixed, (up - a * lo) / width, 1.0)
    a_up = ops.where(up <= 0, a, ops.where(lo >= 0, 1.0, chord))
    b_up = ops.where(mixed, up - chord * up, 0.0)
    a_low = ops.where(up <= 0, a, ops.where(lo >= 0, 1.0, ops.where(up >= -lo, 1.0, a)))
    return a_low, ops.zeros_like(lo), a_up, b_up


def maxpool_rule(step, lo, up):
    """`(best, exact, top)`: the input with the largest lower bound in each window (its flat index
    `(n, d_out)`; a one-hot `(n, d_out, d_in)` where windows overlap), whether it dominates its window
    (`(n, d_out)`: its lower bound is at least every other upper bound there), the window's top upper
    bound. Read through each window's k inputs, `(n, d_out, k)`."""
    members = step.pool.members
    taken = ops.convert_to_tensor(members)
    low, high = ops.take(lo, taken, axis=1), ops.take(up, taken, axis=1)  # (n, d_out, k)
    slot = ops.argmax(low, axis=2)
    chosen = ops.one_hot(slot, members.shape[1], dtype=lo.dtype)  # (n, d_out, k)
    same = ops.convert_to_tensor((members[:, :, None] == members[:, None, :]).astype("float32"))
    is_best = ops.einsum("njk,jkl->njl", chosen, ops.cast(same, lo.dtype)) > 0.5  # duplicates of it
    exact = ops.cast(ops.max(low, axis=2) >= ops.max(ops.where(is_best, -1e30, high), axis=2), lo.dtype)
    best = ops.sum(chosen * ops.cast(taken, lo.dtype), axis=2)
    best = ops.cast(ops.round(best), "int32")
    if step.pool.overlapping:  # the one-hot form
        best = ops.one_hot(best, ops.shape(lo)[1], dtype=lo.dtype)
    return best, exact, ops.max(high, axis=2)


def _maxpool_back(step, positive, negative, rule):
    """The coefficient of the pool's input from `positive + negative * exact` of its output."""
    best, exact, top = rule
    e = ops.expand_dims(exact, 1)
    through = positive + negative * e
    const = ops.sum(negative * (1.0 - e) * ops.expand_dims(top, 1), -1)
    if len(ops.shape(best)) == 3:
        return ops.einsum("nsj,nji->nsi", through, best), const
    owner, covered = ops.convert_to_tensor(step.pool.owner), step.pool.covered
    chosen = ops.take(best, owner, axis=1)  # (n, d_in): the pick of each input's window
    index = ops.convert_to_tensor(np.arange(len(covered), dtype="int32"))
    hit = ops.logical_and(ops.equal(ops.cast(chosen, "int32"), index), covered)
    coefficient = ops.take(through, owner, axis=2)
    return coefficient * ops.expand_dims(ops.cast(hit, through.dtype), 1), const


def _back(step, lam, plan, bounds, matrices):
    """`[(input id, coefficient)]` and the constant `(n, S)` of one step back from `lam` `(n, S, d_out)`."""
    if step.kind == "affine":
        w, b = matrices[id(step)]
        return [(step.inputs[0], ops.einsum("nsj,ij->nsi", lam, w))], ops.einsum("nsj,j->ns", lam, b)
    zero = ops.zeros(ops.shape(lam)[:2], lam.dtype)
    if step.kind in ("identity", "add"):
        return [(i, lam) for i in step.inputs], zero
    lo, up = bounds[step.inputs[0]]
    positive, negative = ops.maximum(lam, 0.0), ops.minimum(lam, 0.0)
    if step.kind == "maxpool":
        coefficient, const = _maxpool_back(step, positive, negative, matrices[id(step)])
        return [(step.inputs[0], coefficient)], const
    a_low, b_low, a_up, b_up = (ops.expand_dims(t, 1) for t in relaxation(step, lo, up))
    coefficient = positive * a_low + negative * a_up
    return [(step.inputs[0], coefficient)], ops.sum(positive * b_low + negative * b_up, axis=-1)


def lower_bound(plan, target, spec, box, bounds, matrices):
    """The lower bound of `spec . z_target`, float `(n, S)`; `spec` float `(n, S, d_target)`."""
    lam, const = {target: spec}, 0.0
    for step in reversed(plan.steps):
        coefficient = lam.pop(step.output, None)
        if coefficient is None:
            continue
        terms, c = _back(step, coefficient, plan, bounds, matrices)
        const = const + c
        for value, a in terms:
            lam[value] = lam[value] + a if value in lam else a
    return _sets.lower_linear(lam[plan.input], const, box) if plan.input in lam else const


def _both(plan, target, spec, box, bounds, matrices):
    """`(lower, upper)` of `spec . z_target` from one backward pass over `[spec; -spec]`."""
    s = ops.shape(spec)[1]
    low = lower_bound(plan, target, ops.concatenate([spec, -spec], axis=1), box, bounds, matrices)
    return low[:, :s], -low[:, s:]


def propagate(plan, box, intermediate=True):
    """`(bounds, matrices)`: IBP's flat bounds tightened by CROWN at every input of an activation or
    max-pool (with `intermediate=False`, IBP's as they are: CROWN-IBP), and the linear maps of the steps
    (affine: `(W, b)`; max-pool: its relaxation). An affine layer on the input itself keeps IBP's
    bounds: they are exact for the norm there (`ibp`)."""
    bounds = ibp.propagate(plan, box)
    matrices = {id(s): ibp.affine_matrix(s, plan) for s in plan.steps if s.kind == "affine"}
    tightened = {plan.input}
    tightened.update(s.output for s in plan.steps if s.kind == "affine" and s.inputs[0] == plan.input)
    for step in plan.steps:
        if intermediate and step.kind in _NONLINEAR and step.inputs[0] not in tightened:
            value = step.inputs[0]
            lo, up = bounds[value]
            n, d = ops.shape(lo)
            eye = ops.broadcast_to(ops.expand_dims(ops.eye(d, dtype=lo.dtype), 0), (n, d, d))
            low, high = _both(plan, value, eye, box, bounds, matrices)
            bounds[value] = (ops.maximum(lo, low), ops.minimum(up, high))
            tightened.add(value)
        if step.kind in _NONLINEAR:
            tightened.add(step.output)  # exact per value, from its tightened input
            lo, up = bounds[step.output]
            new_l, new_u = ibp.step_bounds(step, plan, bounds, box)
            bounds[step.output] = (ops.maximum(lo, new_l), ops.minimum(up, new_u))
            if step.kind == "maxpool":
                matrices[id(step)] = maxpool_rule(step, *bounds[step.inputs[0]])
    return bounds, matrices


def lower_spec(plan, spec, box, intermediate=True):
    """The lower bound of `spec . z` for the logits z, float `(n, S)`, never below IBP's; with
    `intermediate=False` one backward pass from the margins on IBP's intermediate bounds (CROWN-IBP,
    Zhang et al. 2020), whose cost is a few forward passes instead of one pass per neuron."""
    bounds, matrices = propagate(plan, box, intermediate)
    low = lower_bound(plan, plan.output, spec, box, bounds, matrices)
    return ops.maximum(low, ibp.lower_spec(plan, bounds, spec, box))
