"""What APGD and Square share: validation, one cached compiled objective, and the step/forward callables
their numpy cores call on any subset of rows, with the cost counted per sample."""

import numpy as np

from gradkit import _checks, backend
from gradkit.attacks._prepare import gradient_for, owner, prepare, step_for
from gradkit.gradients import n_outputs

_VALUES_PER_CALL = 1 << 22  # the default batch on PyTorch: rows of at most this many input values


def default_batch(x0):
    """The rows per compiled call when the caller gives no `batch_size`: min(256, next power of two >=
    n), or on PyTorch (where a new row count costs a trace of milliseconds, see `backend.ROW_QUANTUM`)
    as many rows as hold `_VALUES_PER_CALL` input values, at least 32 (APGD-T's targets run
    together, and every call has a fixed cost there)."""
    n = len(x0)
    if backend.ROW_QUANTUM:
        return max(backend.ROW_QUANTUM, _VALUES_PER_CALL // max(x0[0].size, 1))
    return min(256, 1 << (n - 1).bit_length())


class Session:
    """A validated attack on `(x, y)`: the callables for the numpy cores and their per-row cost.

    Attributes:
        x0: float32 `(n, ...)` clean inputs; labels: int32 `(n,)`; n_classes: C.
        n_forwards, n_gradients: rows evaluated without / with a gradient so far.
    """

    def __init__(self, model, x, y, *, eps, norm, clip_values, batch_size, output, loss, objective,
                 targeted=False, temperature=1.0, norms=(np.inf, 2), eot_iter=1, surrogate=None):  # fmt: skip
        self.eps, self.norm = _checks.check_eps(eps), _checks.check_norm(norm, allowed=norms)
        self.clip_values = _checks.check_clip_values(clip_values)
        batch_size = _checks.check_batch_size(batch_size)
        self.targeted = _checks.check_flag(targeted, "targeted")
        if isinstance(x, (list, tuple, dict)):
            raise TypeError(
                "`x` must be one array: APGD and Square attack single-input models. Received: x of type "
                f"{type(x).__name__} (use gradkit.pgd for several inputs)"
            )
        grad = gradient_for(model, loss=loss, output=output, batch_size=batch_size)
        self.x0, self.labels, n = prepare(grad, x, y, self.clip_values, batch_size)
        if self.x0.ndim < 2:
            raise ValueError(f"`x` must have a batch axis and features. Received: x.shape={self.x0.shape}")
        self.objective = step_for(owner(model), grad, loss=loss, objective=objective, targeted=targeted,
                                  output=output, batch_size=batch_size or default_batch(self.x0),
                                  temperature=temperature, eot_iter=eot_iter,
                                  surrogate=surrogate)  # fmt: skip
        if self.objective is None:
            raise ValueError(f"`loss` must be one of 'ce', 'dlr', 'margin'. Received: loss={loss!r}")
        classes = n_outputs(grad.ensemble.models[0], grad.output_index, self.x0)
        self.n_classes = 2 if classes == 1 else classes
        self.n_forwards = self.n_gradients = 0

    def step(self, x, labels, targets):
        """`(values, predictions, grad)` on the given rows, counted."""
        values, logits, grad = self.objective(x, labels, targets)
        self.n_gradients += len(labels)
        return values, self.objective.decide(logits), grad

    def forward(self, x, labels, targets):
        """`(values, predictions)` on the given rows, counted."""
        return self.bind(labels, targets)(x)

    def bind(self, labels, targets):
        """`forward` on rows whose labels and targets stay fixed: `bound(x) -> (values, predictions)`,
        counted (see `AttackGradient.bind`)."""
        bound = self.objective.bind(labels, targets)

        def forward(x):
            values, logits = bound(x)
            self.n_forwards += len(labels)
            return values, self.objective.decide(logits)

        return forward

    def predict(self, x):
        """The real decision `(n,)` on `x`."""
        return self.forward(x, self.labels, None)[1]

    def top_classes(self, k):
        """`(n, k)`: for each sample, its k most likely classes other than its TRUE label, by the clean
        logits (the weighted mean over members for an ensemble), most likely first (AutoAttack's APGD-T
        targets; a target is never the label, so success always means misclassification)."""
        _, logits = self.objective.forward(self.x0, self.labels)
        weights = np.asarray(self.objective.ensemble.weights).reshape(-1, 1, 1)
        scores = (weights * logits).sum(axis=0)
        scores[np.arange(len(scores)), self.labels] = -np.inf
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
