"""Per-signature TorchScript traces of gradkit's pure functions on the PyTorch backend.

Why: on a small CNN and a CPU, Keras' per-layer Python (`Layer.__call__`, the variable scope of
`stateless_call`) costs about three times the arithmetic of a forward pass, and score-based attacks
such as Square make thousands of such calls one after the other. `torch.jit.trace` records the torch
operations a call runs once per input signature and replays them without the Python, autograd included
(gradients flow through a trace as through the eager call).

A trace is used only where it is exact. A trace freezes every Python value it read from a tensor
(torch's TracerWarning: shapes, which the signature fixes anyway, but also a value-dependent branch
or a random seed), so before it is used it must reproduce the eager function both on the tracing
inputs and on a second input of the same signature (rows rolled, values moved by noise). Otherwise,
or where tracing raises, that signature runs eagerly. Setting the environment variable
`GRADKIT_TORCH_TRACE=0` (or `ENABLED = False`) turns tracing off. What gradkit reports never rests on
a trace alone: attack successes are confirmed with the model's own `predict`.

`torch.jit.trace` is deprecated upstream in favour of `torch.export` (slower to build a program and no
faster to call) and `torch.compile` (long to compile on a CPU). Its warnings are silenced during
tracing; where `torch.jit.trace` is gone or fails, everything runs eagerly.

The PyTorch backend's `compile_forward` (and its `bind`, for the thousands of calls of a score-based
attack on the same rows) lives here, next to the traces it serves.
"""

import os
import warnings

import torch

ENABLED = os.environ.get("GRADKIT_TORCH_TRACE", "1") != "0"
_RTOL, _ATOL = 1e-5, 1e-6


def flatten(obj):
    """The leaves of nested lists, tuples and dicts (dicts in sorted key order), as a list. Plain
    Python: `keras.tree` goes through torch's pytree, which costs more than the call it serves."""
    if isinstance(obj, (list, tuple)):
        return [leaf for item in obj for leaf in flatten(item)]
    if isinstance(obj, dict):
        return [leaf for key in sorted(obj) for leaf in flatten(obj[key])]
    return [obj]


def pack(structure, leaves):
    """`structure` (nested lists, tuples, dicts) with its leaves replaced, in `flatten` order."""
    it = iter(leaves)

    def build(obj):
        if isinstance(obj, (list, tuple)):
            return type(obj)(build(item) for item in obj)
        if isinstance(obj, dict):
            return {key: build(obj[key]) for key in sorted(obj)}
        return next(it)

    return build(structure)


class Traced:
    """`fn(*args)` through a trace per signature of `args`, or eagerly where no exact trace exists.

    Args:
        fn: a pure function of nested tensors (lists, tuples, dicts) returning nested tensors.

    Attributes:
        n_traced, n_eager: signatures served by a trace, and signatures that run eagerly.
    """

    def __init__(self, fn):
        self.fn = fn
        self._traces = {}
        self.n_traced = self.n_eager = 0

    def __call__(self, key, *args):
        """`fn(*args)`. `key` names the signature of `args` (structure, shapes and dtypes); the first
        call of a key runs eagerly (its output is returned) and builds the trace later calls use."""
        entry = self._traces.get(key)
        if entry is None:
            out = self.fn(*args)
            entry = self._traces[key] = self._trace(args, out) if ENABLED else False
            self.n_traced += entry is not False
            self.n_eager += entry is False
            return out
        if entry is False:
            return self.fn(*args)
        traced, structure = entry
        return pack(structure, traced(*[t for t in flatten(args) if isinstance(t, torch.Tensor)]))

    def _trace(self, args, expected):
        """`(traced, output structure)`, or False where no exact trace can be taken."""
        leaves = flatten(args)
        tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

        def flat_fn(*flat):
            full = list(leaves)
            for i, t in zip(tensors, flat):
                full[i] = t
            return tuple(flatten(self.fn(*pack(args, full))))

        example = tuple(leaves[i].detach() for i in tensors)
        probe = tuple(_probe(t, k) for k, t in enumerate(example))
        outputs = flatten(expected)
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # TracerWarnings on shapes; the checks below decide
                traced = torch.jit.trace(flat_fn, example, check_trace=False)
                exact = _same(traced(*example), outputs)
                exact = exact and _same(traced(*probe), flat_fn(*probe))
        except Exception:  # noqa: BLE001 - any failure to trace means "run eagerly"
            return False
        return (traced, pack(expected, [None] * len(outputs))) if exact else False  # keeps no tensor

    def replay(self, key):
        """`(traced, output structure)` for a signature served by a trace, else None (a signature not
        seen yet, or one that runs eagerly): callers that flatten their own arguments call `traced`
        on the tensors in `flatten` order and `pack` its outputs."""
        entry = self._traces.get(key)
        return entry or None

    def __contains__(self, key):
        return key in self._traces


def _probe(t, k):
    """Other inputs of the same signature: rows rolled by one (labels stay valid ids), and floating
    values moved by a small deterministic noise, so a trace that froze a value-dependent branch or
    a random draw of the tracing call is caught."""
    if t.ndim and t.shape[0] > 1:
        t = torch.roll(t, 1, dims=0)
    if t.is_floating_point():
        generator = torch.Generator(device=t.device).manual_seed(1234 + k)
        noise = torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype)
        t = t + noise * (0.05 * t.std(unbiased=False) + 1e-3 if t.numel() > 1 else 1e-3)
    return t


def _same(got, expected):
    if len(got) != len(expected):
        return False
    for a, b in zip(got, expected):
        b = b.detach() if isinstance(b, torch.Tensor) else torch.as_tensor(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not torch.allclose(a, b, rtol=_RTOL, atol=_ATOL, equal_nan=True):
            return False
    return True


def signature(*args):
    """The trace key of the data arguments: each leaf's shape and dtype (the variables' are fixed)."""
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in flatten(args))


def compile_forward(fn):
    """`fn(trainable, non_trainable, x, y, weights)` without autograd (`torch.no_grad`), traced per
    signature where the trace is exact."""
    traced = Traced(fn)

    def call(*args):
        key = signature(*args[2:])
        call.trace_count += key not in traced
        with torch.no_grad():
            return traced(key, *args)

    def bind(trainable, non_trainable, y, weights):
        """`lambda x: call(trainable, non_trainable, x, y, weights)` for one tensor `x`, the other
        arguments flattened once (a score-based attack's thousands of calls on the same rows)."""
        rest = signature(y, weights)
        before = [t for t in flatten((trainable, non_trainable)) if isinstance(t, torch.Tensor)]
        after = [t for t in flatten((y, weights)) if isinstance(t, torch.Tensor)]

        def bound(x):
            entry = traced.replay(((tuple(x.shape), x.dtype),) + rest)
            if entry is None:  # first call of this shape (it builds the trace), or an eager one
                return call(trainable, non_trainable, x, y, weights)
            with torch.no_grad():
                return pack(entry[1], entry[0](*before, x, *after))

        return bound

    call.trace_count, call.traced, call.bind = 0, traced, bind
    return call
