"""The binarized model of one test point (Zimmermann et al. 2022, sec. 4): the classifier's penultimate
features, the points sampled inside and on the eps-ball, and the binary linear readout fitted on them.

The readout is a logistic regression of "boundary" (class 1) against "inner" (class 0) on the features
phi(x), fitted by Newton's method (iteratively reweighted least squares) with a small ridge, in numpy,
once per test point: it is part of building the test, not of the attack. Its logits are rescaled so
that the logit difference d = z_1 - z_0 spans [-1, 1] on the training points (the authors' "fixed"
rescaling).
"""

import keras
import numpy as np

from gradkit import _keras_internals

_ACTIVATIONS = (keras.layers.Activation, keras.layers.Softmax)
_RIDGES = (1e-4, 1e-6, 1e-8)  # tried in turn until the readout separates (features scaled to unit RMS)
_NEWTON_STEPS = 50


def _expected(name):
    return (
        f"`{name}` must be a Sequential or Functional Keras model whose output is a Dense layer (optionally "
        "followed by Activation or Softmax layers): the self-test replaces that last linear layer by a "
        "binary readout on its input features"
    )


def penultimate(model, name="model"):
    """`(input, features)`: the symbolic input of `model` and the input of its last Dense layer (the
    features phi of shape `(None, f)` the readout reads).

    Raises:
        ValueError: `model` has no symbolic graph, no Dense layer at its output (after an optional
            `Activation` or `Softmax` layers) or features of another rank than 2.
    """
    inputs, outputs = _graph(model, "inputs"), _graph(model, "outputs")
    if not inputs or not outputs or len(inputs) != 1 or len(outputs) != 1:
        raise ValueError(f"{_expected(name)}. Received: {name}={type(model).__name__} without such a graph")
    tensor, layer = outputs[0], _keras_internals.producing_layer(outputs[0])
    while isinstance(layer, _ACTIVATIONS) and len(_keras_internals.producing_inputs(tensor)) == 1:
        tensor = _keras_internals.producing_inputs(tensor)[0]
        layer = _keras_internals.producing_layer(tensor)
    if not isinstance(layer, keras.layers.Dense):
        found = f"{getattr(layer, 'name', layer)!r} ({type(layer).__name__})"
        raise ValueError(f"{_expected(name)}. Received: a model whose output comes from {found}")
    (features,) = _keras_internals.producing_inputs(tensor)  # a Dense layer has one input
    if len(features.shape) != 2:
        raise ValueError(
            f"{_expected(name)}, of features shaped (batch, f). Received: features of shape {features.shape}"
        )
    return inputs[0], features


def _graph(model, name):
    """`model.inputs` or `model.outputs` as a list; empty for anything without a symbolic graph."""
    try:
        return list(getattr(model, name, None) or []) if isinstance(model, keras.Model) else []
    except (AttributeError, ValueError):
        return []


def sample_inner(x0, n, radius, norm, clip_values, rng):
    """`n` points uniform in the `norm` ball of `radius` around `x0` (a box for Linf), clipped to
    `clip_values`: float32 `(n, *x0.shape)`."""
    shape, d = (n, *x0.shape), x0.size
    if norm == np.inf:
        delta = rng.uniform(-radius, radius, size=shape)
    else:  # a uniform direction, and a radius with density proportional to r^(d-1)
        delta = rng.standard_normal(shape)
        delta /= np.maximum(np.linalg.norm(delta.reshape(n, -1), axis=1), 1e-12).reshape(-1, *[1] * x0.ndim)
        delta *= (radius * rng.uniform(size=n) ** (1.0 / d)).reshape(-1, *[1] * x0.ndim)
    return _clip(x0 + delta, clip_values)


def _clip(x, clip_values):
    lo, hi = clip_values or (-np.inf, np.inf)
    return np.clip(x, lo, hi).astype(np.float32)


def sample_boundary(x0, n, eps, norm, clip_values, rng):
    """`n` points at distance `eps` from `x0` inside `clip_values`: float32 `(n, *x0.shape)`.

    Linf: uniform in the box, scaled so that its largest coordinate is eps (the box's surface); when
    clipping cut that coordinate, the coordinate with the most room moves to eps. L2: a uniform direction
    scaled so that the clipped point lies at eps (clipping-aware rescaling, Rauber & Bethge 2020, by
    bisection on the scale); a direction that cannot reach eps inside the box stops at the box.
    """
    x0 = x0.astype(np.float64)
    lo, hi = clip_values or (-np.inf, np.inf)
    flat = x0.reshape(-1)
    room_up, room_down = hi - flat, flat - lo
    points = []
    for _ in range(n):
        if norm == np.inf:
            delta = rng.uniform(-1.0, 1.0, size=flat.shape)
            delta *= eps / max(np.abs(delta).max(), 1e-12)
            delta = np.clip(delta, -room_down, room_up)
            if np.abs(delta).max() < eps * (1 - 1e-9):
                j = int(np.argmax(np.maximum(room_up, room_down)))
                delta[j] = min(eps, room_up[j]) if room_up[j] >= room_down[j] else -min(eps, room_down[j])
        else:
            delta = _clipped_to_sphere(rng.standard_normal(flat.shape), eps, room_up, room_down)
        points.append(flat + delta)
    return _clip(np.reshape(points, (n, *x0.shape)), clip_values)


def _clipped_to_sphere(direction, eps, room_up, room_down):
    """`clip(s * direction)` with the scale s chosen so that its L2 norm is `eps` (each coordinate clipped
    to `[-room_down, room_up]`); the largest reachable norm if eps is out of reach."""
    reach = np.where(direction > 0, room_up, room_down)

    def size(s):
        return np.linalg.norm(np.minimum(s * np.abs(direction), reach))

    low, high = 0.0, eps / max(np.linalg.norm(direction), 1e-12)
    while size(high) < eps and high < 1e12:
        low, high = high, 2.0 * high
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if size(mid) < eps else (low, mid)
    return np.sign(direction) * np.minimum(low * np.abs(direction), reach)


def fit_readout(features, is_boundary):
    """The binary readout `(kernel (f, 2), bias (2,))` of features `(m, f)`: a logistic regression of
    `is_boundary` (bool `(m,)`), the classes weighted equally, by Newton's method with a ridge
    lambda ||w||^2 / 2 on features centred at row 0 and scaled to unit RMS (lambda from 1e-4 down to
    1e-8 until it separates). The logits are rescaled so that d = z_1 - z_0 spans [-1, 1] on the
    training rows. Returns None when the features are all equal (nothing to separate).
    """
    phi = np.asarray(features, np.float64)
    centred = phi - phi[0]
    scale = float(np.sqrt(np.mean(centred**2)))
    if scale == 0.0:
        return None
    basis = None
    if centred.shape[1] > centred.shape[0]:  # the ridge solution lies in the span of the rows
        _, _, basis = np.linalg.svd(centred / scale, full_matrices=False)
    coords = centred / scale if basis is None else centred / scale @ basis.T
    design = np.hstack([coords, np.ones((len(coords), 1))])
    t = np.asarray(is_boundary, np.float64)
    c = np.where(t > 0, 0.5 / t.sum(), 0.5 / (len(t) - t.sum()))
    theta = np.zeros(design.shape[1])
    for ridge in _RIDGES:
        theta = _newton(design, t, c, ridge, theta)
        if np.all((design @ theta > 0) == (t > 0)):
            break
    w = theta[:-1] if basis is None else basis.T @ theta[:-1]
    d = design @ theta
    m = max(float(np.abs(d).max()), 1e-12)
    v, beta = w / (scale * m), (theta[-1] - w @ phi[0] / scale) / m  # d(phi) = v . phi + beta
    kernel = np.stack([-v / 2, v / 2], axis=1)
    return kernel.astype(np.float32), np.array([-beta / 2, beta / 2], np.float32)


def _newton(design, t, c, ridge, theta):
    """Minimises sum_i c_i (log(1 + e^{a_i theta}) - t_i a_i theta) + ridge ||theta||^2 / 2 from `theta`."""
    for _ in range(_NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ theta, -500, 500)))
        grad = design.T @ (c * (p - t)) + ridge * theta
        hess = (design.T * (c * p * (1 - p))) @ design + ridge * np.eye(len(theta))
        step = np.linalg.solve(hess, grad)
        theta = theta - step
        if np.linalg.norm(step) <= 1e-9 * (1.0 + np.linalg.norm(theta)):
            break
    return theta
