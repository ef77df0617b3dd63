"""`certify` and `output_bounds`: certified lower bounds of a classifier's margins, by IBP or CROWN."""

import dataclasses

import keras
import numpy as np

from gradkit import _checks, backend
from gradkit._checks import broadcast_box, check_clip, check_mask
from gradkit.certificates import _graph, crown, ibp
from gradkit.gradients import affine_of, cached

METHODS = ("ibp", "crown-ibp", "crown")  # the bound methods `certify` takes, cheapest first
_ENTRIES = 1 << 25  # float entries of CROWN's largest coefficient array per block (128 MiB in float32)


@dataclasses.dataclass
class Certificate:
    """What `certify` proves about each point.

    Attributes:
        certified: bool `(n,)`, True where every margin's lower bound is > 0: no input of the set changes
            the predicted class away from `y`.
        margins: float32 `(n, C)`, lower bounds of z_y - z_j over the set (+inf at j = y); a point that is
            misclassified at x itself has a negative margin.
        certified_accuracy: float, the mean of `certified`.
        eps, norm, method, clip_values: the settings.
    """

    certified: np.ndarray
    margins: np.ndarray
    eps: float
    norm: float
    method: str
    clip_values: tuple = None

    @property
    def certified_accuracy(self):
        return float(np.mean(self.certified)) if len(self.certified) else 0.0

    def __repr__(self):
        norm = "linf" if self.norm == np.inf else "l2"
        return (
            f"Certificate(certified_accuracy={self.certified_accuracy:.4f}, n={len(self.certified)}, "
            f"eps={self.eps:g}, norm={norm!r}, method={self.method!r}, clip_values={self.clip_values})"
        )


def _check(model, x, eps, norm, method, clip_values, batch_size, preprocessing=None, mask=None):
    if not isinstance(model, keras.Model):
        _checks.fail("model", "a Keras model", type(model).__name__, TypeError)
    model, affine = affine_of(preprocessing, model)
    method = _checks.check_choice(method, "method", METHODS)
    norm = _checks.check_norm(norm)
    eps = _checks.check_eps(eps)
    if affine is not None and norm == 2 and np.unique(affine[1]).size > 1:
        raise ValueError(
            "`preprocessing` must have one std for an L2 ball (a per-channel std maps it to an ellipsoid, "
            f"which has no bound rule). Received: std={affine[1].tolist()} with norm='l2'"
        )
    clip_values, mask = check_clip(clip_values), check_mask(mask)
    if mask is not None and norm != np.inf:
        _checks.fail(
            "mask", "None for norm='l2' (a mask of the L2 ball is not bounded here; use linf)", "an array"
        )
    batch_size = None if batch_size is None else _checks.check_batch_size(batch_size)
    plan = cached(model, "certify-plan", lambda: _graph.plan(model))
    x = np.asarray(x, dtype=np.float32) if not isinstance(x, np.ndarray) else x.astype(np.float32, copy=False)
    if x.ndim < 1 or tuple(x.shape[1:]) != tuple(plan.shapes[plan.input]):
        _checks.fail("x", f"an array of shape (n, {', '.join(map(str, plan.shapes[plan.input]))})", x.shape)
    if not np.all(np.isfinite(x)):
        _checks.fail("x", "finite values", "an array with NaN or inf")
    if clip_values is not None and np.ndim(clip_values[0]) or mask is not None:  # per feature, or a mask
        clip_values, mask = broadcast_box(clip_values, mask, x)
        if clip_values is not None and (np.any(x < clip_values[0]) or np.any(x > clip_values[1])):
            _checks.fail("x", "values inside their per-feature clip_values", f"array of shape {x.shape}")
    elif clip_values is not None and (x.min() < clip_values[0] or x.max() > clip_values[1]):
        _checks.fail("x", f"values inside clip_values {clip_values}", f"range [{x.min():g}, {x.max():g}]")
    return model, affine, plan, x, eps, norm, method, clip_values, batch_size, mask


def _labels(y, n, n_classes):
    """int `(n,)` class ids from ids or one-hot rows; ValueError otherwise."""
    classes = max(n_classes, 2)
    y = np.asarray(y)
    if y.ndim == 2 and y.shape == (n, classes) and np.all((y == 0) | (y == 1)) and np.all(y.sum(1) == 1):
        y = np.argmax(y, axis=1)
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.number) or np.any(y != np.round(y)):
        _checks.fail("y", f"{n} class ids or one-hot rows of {classes} classes", f"shape {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= classes):
        _checks.fail("y", f"class ids in [0, {classes})", f"range [{y.min()}, {y.max()}]")
    return y.astype(np.int64)


def _spec(labels, n_classes):
    """float32 `(n, S, K)`: the margins z_y - z_j (K >= 2), or +-z of one logit (class 1 iff z > 0)."""
    if n_classes == 1:
        return (2.0 * labels - 1.0).astype(np.float32)[:, None, None]
    eye = np.eye(n_classes, dtype=np.float32)
    return eye[labels][:, None, :] - eye[None]


def _box(x, eps, norm, clip_values, affine=None, mask=None):
    """`(x0, xl, xu, eps)` flat float32 arrays: the point, the box part of its set, the radius. Bounds
    may be per feature (arrays `(1, ...)`); the features `mask` (None, or 0/1 `(1, ...)`) holds fixed
    have `xl = xu = x0` (Linf). With an affine preprocessing `(mean, std)`, mapped into the model's units
    by u = (x - mean) / std (increasing per feature: the box maps onto a box, exactly; an L2 ball of one
    std onto the ball of radius eps / std; the Linf bound reads the box alone)."""
    x0 = x.reshape(len(x), int(np.prod(x.shape[1:])))
    xl, xu = x0 - eps, x0 + eps
    if clip_values is not None and np.ndim(clip_values[0]):
        clip_values = tuple(np.reshape(b, (1, -1)) for b in clip_values)
    if clip_values is not None:
        xl, xu = np.maximum(xl, clip_values[0]), np.minimum(xu, clip_values[1])
    if mask is not None:
        fixed = np.reshape(mask, (1, -1)) == 0
        xl, xu = np.where(fixed, x0, xl), np.where(fixed, x0, xu)
    radius = np.full(len(x), eps, np.float32)
    if affine is not None:
        mean, std = (np.broadcast_to(a, x.shape[1:]).reshape(-1) for a in affine)
        x0, xl, xu, radius = (x0 - mean) / std, (xl - mean) / std, (xu - mean) / std, radius / std[0]
    return x0.astype(np.float32), xl.astype(np.float32), xu.astype(np.float32), radius.astype(np.float32)


def _bound_fn(plan, norm, method):
    """fn(trainable, non_trainable, x0, xl, xu, eps, spec) -> lower bounds `(n, S)` of `spec . logits`."""
    logits = plan.logits

    def fn(trainable, non_trainable, x0, xl, xu, eps, spec):
        mapping = list(zip(logits.trainable_variables, trainable))
        mapping += list(zip(logits.non_trainable_variables, non_trainable))
        with keras.StatelessScope(state_mapping=mapping):
            box = (x0, xl, xu, eps, norm)
            if method == "ibp":
                return ibp.lower_spec(plan, ibp.propagate(plan, box), spec, box)
            return crown.lower_spec(plan, spec, box, intermediate=method == "crown")

    return fn


def _rows_per_block(plan, method, n_specs, batch_size):
    if batch_size is not None:
        return batch_size
    if method != "crown":  # no coefficient array wider than the specs
        return 256
    widths = [int(np.prod(s)) for s in plan.shapes.values()]
    widest = max(widths)
    return int(max(1, min(256, _ENTRIES // max(1, 2 * max(widest, n_specs) * widest))))


def _lower_bounds(model, plan, x, spec, eps, norm, method, clip_values, batch_size, affine=None, mask=None):
    """Lower bounds `(n, S)` of `spec . logits` over each point's set, block by block."""
    build = lambda: backend.compile_forward(_bound_fn(plan, norm, method))  # noqa: E731
    fn = cached(model, "certify", build, norm=norm, method=method)
    trainable = backend.variable_values(model.trainable_variables)
    non_trainable = backend.variable_values(model.non_trainable_variables)
    x0, xl, xu, radius = _box(x, eps, norm, clip_values, affine, mask)
    rows, out = _rows_per_block(plan, method, spec.shape[1], batch_size), []
    for start in range(0, len(x), rows):
        block = slice(start, start + rows)
        args = [backend.to_tensor(a[block]) for a in (x0, xl, xu, radius, spec)]
        out.append(backend.to_numpy(fn(trainable, non_trainable, *args)))
    return np.concatenate(out) if out else np.zeros((0, spec.shape[1]), np.float32)


def certify(
    model,
    x,
    y,
    eps,
    *,
    norm="linf",
    method="crown",
    clip_values=None,
    batch_size=None,
    preprocessing=None,
    mask=None,
):
    """Certified lower bounds of the margins z_y - z_j of a classifier over an eps-ball around each point.

    The model's logits are bounded over {x' : ||x' - x|| <= eps} intersected with the box `clip_values`,
    layer by layer (see `gradkit.certificates` for the supported layers; a final softmax is removed and its
    logits certified). A point is certified when every margin's lower bound is > 0: no attack within the
    set can change its class. Compiled once per model, norm and method.

    Args:
        model: a Sequential or Functional Keras classifier, one input, one output (logits, or a softmax).
        x: float `(n, *input_shape)`, inside `clip_values`.
        y: int `(n,)` class ids (or one-hot `(n, C)`).
        eps: float >= 0, the radius in input units.
        norm: "linf" (np.inf) or "l2" (2). Defaults to "linf".
        method: "ibp" (interval bound propagation, Gowal et al. 2018), "crown" (backward linear
            relaxation, Zhang et al. 2018, with its own intermediate bounds: one backward pass per
            neuron; never looser than IBP) or "crown-ibp" (one backward pass from the margins on IBP's
            intermediate bounds, Zhang et al. 2020: between the two in cost and tightness). Defaults to
            "crown".
        clip_values: None or `(lo, hi)`, the valid input range the set is intersected with: floats, or
            arrays broadcastable to one input's shape (per feature).
        batch_size: rows per compiled call; None picks 256 for IBP and what fits 128 MiB for CROWN.
        preprocessing: None (default) or `(mean, std)` (floats or arrays broadcastable to one input's
            shape): the model sees `(x - mean) / std`, while `x`, eps and `clip_values` are in the units
            of `x` (pixels). The affine map is folded into the input set (a box maps onto a box; L2 needs
            one std). A model built by `gradkit.gradients.preprocessed` (what the attacks'
            `preprocessing=` attacks) is read as its inner model and its preprocessing.
        mask: None (default) or a 0/1 array broadcastable to one input's shape, Linf only: the features
            at 0 stay at x (their interval is the point itself).

    Returns:
        A `Certificate` with `certified` `(n,)` bool, `margins` `(n, C)` and `certified_accuracy`.

    Raises:
        ValueError: a layer without a bound rule (named), a bad `eps`, `norm`, `method`, `clip_values`,
            `x` of the wrong shape or outside `clip_values`, labels that do not match, a callable
            `preprocessing` (no bound rule: put it in the model's layers), a per-channel std under L2.
        TypeError: `model` is not a Keras model.

    References:
        Gowal et al. (2018), "On the effectiveness of interval bound propagation for training verifiably
        robust models", https://arxiv.org/abs/1810.12715. Zhang et al. (2018), "Efficient neural network
        robustness certification with general activation functions", NeurIPS,
        https://arxiv.org/abs/1811.00866. Zhang, Chen, Xiao, Gowal, Stanforth, Li, Boning & Hsieh (2020),
        "Towards stable and efficient training of verifiably robust neural networks" (CROWN-IBP), ICLR,
        https://arxiv.org/abs/1906.06316.
    """
    model, affine, plan, x, eps, norm, method, clip_values, batch_size, mask = _check(
        model, x, eps, norm, method, clip_values, batch_size, preprocessing, mask
    )
    n_classes = int(np.prod(plan.shapes[plan.output]))
    labels = _labels(y, len(x), n_classes)
    spec = _spec(labels, n_classes)
    low = _lower_bounds(model, plan, x, spec, eps, norm, method, clip_values, batch_size, affine, mask)
    if n_classes == 1:  # margins of the two classes: the bound of +-z at the other class
        margins = np.full((len(x), 2), np.inf, np.float32)
        margins[np.arange(len(x)), 1 - labels] = low[:, 0]
    else:
        margins = low
    margins[np.arange(len(x)), labels] = np.inf
    certified = np.all(margins > 0, axis=1)
    return Certificate(certified, margins.astype(np.float32), float(eps), norm, method, clip_values)


def output_bounds(
    model,
    x,
    eps,
    *,
    norm="linf",
    method="crown",
    clip_values=None,
    batch_size=None,
    preprocessing=None,
    mask=None,
):
    """Lower and upper bounds of a classifier's logits over an eps-ball around each point.

    Args:
        model, x, eps, norm, method, clip_values, batch_size, preprocessing, mask: as in `certify`.

    Returns:
        `(lower, upper)`, float32 arrays shaped like the model's output `(n, *output_shape)`: every
        logit of every input in the set lies between them.

    Raises:
        ValueError, TypeError: as in `certify`.
    """
    model, affine, plan, x, eps, norm, method, clip_values, batch_size, mask = _check(
        model, x, eps, norm, method, clip_values, batch_size, preprocessing, mask
    )
    k = int(np.prod(plan.shapes[plan.output]))
    eye = np.eye(k, dtype=np.float32)
    spec = np.broadcast_to(np.concatenate([eye, -eye])[None], (len(x), 2 * k, k)).copy()
    low = _lower_bounds(model, plan, x, spec, eps, norm, method, clip_values, batch_size, affine, mask)
    shape = (len(x),) + tuple(plan.shapes[plan.output])
    return low[:, :k].reshape(shape), (-low[:, k:]).reshape(shape)
