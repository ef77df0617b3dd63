"""The input set of a certificate and the exact bound of a linear function over it.

The set is the eps-ball around x0 in the Linf or L2 norm, intersected with the box `clip_values`:
`xl <= x <= xu` holds the box part (`max(x0 - eps, lo)`, `min(x0 + eps, hi)`). Over it, the lower bound
of `A x + c` is, per row of A,

    Linf: sum_i max(A_i, 0) xl_i + min(A_i, 0) xu_i + c        (exact: the set is that box)
    L2:   max(the box bound above, A x0 - eps ||A||_2 + c)      (each bounds a superset of the set)

Reference: Zhang, Weng, Chen, Hsieh & Daniel (2018), "Efficient neural network robustness certification
with general activation functions" (CROWN), NeurIPS, https://arxiv.org/abs/1811.00866, Theorem 3.2 (the
dual norm of the ball).
"""

from keras import ops


def lower_linear(a, const, box):
    """The lower bound of `a . x + const` over the input set.

    Args:
        a: float `(n, S, d)`, S linear functions per point of the flat input.
        const: float `(n, S)`.
        box: `(x0, xl, xu, eps, norm)`: x0, xl, xu float `(n, d)`; eps float `(n,)`; norm inf or 2.

    Returns:
        float `(n, S)`.
    """
    x0, xl, xu, eps, norm = box
    low = ops.einsum("nsd,nd->ns", ops.maximum(a, 0.0), xl) + ops.einsum(
        "nsd,nd->ns", ops.minimum(a, 0.0), xu
    )
    if norm == 2:
        ball = ops.einsum("nsd,nd->ns", a, x0) - ops.expand_dims(eps, 1) * ops.sqrt(ops.sum(a * a, axis=-1))
        low = ops.maximum(low, ball)
    return low + const


def interval(box):
    """The flat interval `(xl, xu)` that contains the input set."""
    return box[1], box[2]
