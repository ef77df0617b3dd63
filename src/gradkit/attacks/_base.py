"""What FGSM, BIM and PGD share: argument checks, projection, clipping, random start and the step loop.

Every attack is the same loop (Madry et al. 2018): start at the clean input x0 (or at a random point of
the eps-ball around it), then `steps` times: take the input gradient of the loss, move `eps_step` along
its sign (Linf) or its per-sample unit-L2 direction (L2), project the perturbation onto the eps-ball
around the CLEAN input x0, and clip to `clip_values`. Each step is one compiled call of
`gradkit.InputGradient` for all ensemble members; the step loop stays in Python, since a loop of compiled
steps measured 7.5x faster on CPU than one fused `jax.lax.fori_loop`.

The projection is done before the clipping (as foolbox does); both keep every coordinate between x0 and
the proposed point, so the result lies in the ball and in the box. Several inputs (a list or dict `x`)
each get their own eps-ball: norms and projections are per sample and per input.
"""

import numbers

import keras
import numpy as np
from keras import tree

from gradkit import validation
from gradkit.ensemble import WeightedEnsemble, as_ensemble
from gradkit.gradients import InputGradient, cached

_NORMS = {"inf": np.inf, "linf": np.inf, "l2": 2.0, "2": 2.0}
_TINY = 1e-12  # floor of a norm before dividing by it (a zero gradient then gives a zero step)
SINGLE_STEP = object()  # `eps_step` of FGSM: one step of size eps (a user's None is still rejected)


def _number(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number. Received: {name}={value!r}")
    return float(value)


def check_eps(eps, name="eps"):
    """`eps` as a float; raises ValueError unless it is a finite number >= 0."""
    eps = _number(eps, name)
    if eps < 0:
        raise ValueError(f"`{name}` must be >= 0. Received: {name}={eps}")
    return eps


def check_eps_step(eps_step):
    """`eps_step` as a float; raises ValueError unless it is a finite number > 0."""
    eps_step = _number(eps_step, "eps_step")
    if eps_step <= 0:
        raise ValueError(f"`eps_step` must be > 0. Received: eps_step={eps_step}")
    return eps_step


def check_steps(steps):
    """`steps` as an int; raises TypeError for a non-integer, ValueError when < 1."""
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
        raise TypeError(f"`steps` must be an integer >= 1. Received: steps={steps!r}")
    if steps < 1:
        raise ValueError(f"`steps` must be an integer >= 1. Received: steps={steps}")
    return int(steps)


def check_norm(norm):
    """np.inf / "inf" / "linf" -> np.inf and 2 / "l2" -> 2.0; anything else raises ValueError."""
    key = norm.lower() if isinstance(norm, str) else norm
    if isinstance(key, numbers.Real) and not isinstance(key, bool) and key in (np.inf, 2):
        return float(key)
    if isinstance(key, str) and key in _NORMS:
        return _NORMS[key]
    raise ValueError(f'`norm` must be np.inf (or "inf", "linf") or 2 (or "l2"). Received: norm={norm!r}')


def check_clip_values(clip_values):
    """None, or `(min, max)` as two floats with min <= max; raises ValueError otherwise."""
    if clip_values is None:
        return None
    try:
        lo, hi = clip_values
        lo, hi = _number(lo, "clip_values[0]"), _number(hi, "clip_values[1]")
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"`clip_values` must be None or a pair (min, max) of finite numbers. "
            f"Received: clip_values={clip_values!r}"
        ) from err
    if lo > hi:
        raise ValueError(f"`clip_values` must have min <= max. Received: clip_values={clip_values!r}")
    return lo, hi


def _check_seed(seed):
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise ValueError(f"`seed` must be None or an integer >= 0. Received: seed={seed!r}")
    return seed


def gradient_for(model, *, loss=None, output=None, batch_size=None):
    """The `InputGradient` (inference mode) for `model`, cached on the model or ensemble object.

    Attacks with the same `(loss, output, batch_size)` on the same object reuse one compiled function,
    so a robustness curve over many epsilons traces once (`.trace_count`). Keras models share the cache
    of `gradkit.input_gradient`. Other objects (boosting estimators) are turned into an ensemble with
    `as_ensemble`, and the cache lives on that ensemble.
    """
    if not isinstance(model, (keras.Model, WeightedEnsemble)):
        model = as_ensemble(model)

    def factory():
        return InputGradient(model, loss=loss, training=False, output=output, batch_size=batch_size)

    return cached(model, "input", factory, loss=loss, training=False, output=output, batch_size=batch_size)


def _leaf_names(x):
    if isinstance(x, dict):
        return list(x)
    if isinstance(x, (list, tuple)):
        return [f"x[{i}]" for i in range(len(x))]
    return ["x"]


def check_range(x, clip_values):
    """Raises ValueError when a leaf of the validated `x` lies outside `clip_values`."""
    if clip_values is None:
        return
    lo, hi = clip_values
    for name, leaf in zip(_leaf_names(x), tree.flatten(x)):
        if leaf.min() < lo or leaf.max() > hi:
            raise ValueError(
                f"`x` must lie inside clip_values={clip_values} (input {name!r} spans "
                f"[{leaf.min()}, {leaf.max()}]): the attack could not keep it in range otherwise."
            )


def predict_labels(grad, x, batch_size=None):
    """Hard predictions `(n,)` int64 of the attacked output: the weighted hard vote of
    `WeightedEnsemble.predict`, reading one-unit outputs as the attack's loss does (logits or not)."""
    votes = grad.ensemble.decision_function(
        x, batch_size or 256, output=grad.output_index, from_logits=[spec.from_logits for spec in grad.specs]
    )
    return votes.argmax(axis=1)


def prepare(grad, x, y, clip_values, batch_size=None):
    """Validated `(x, labels, n)`; `y=None` becomes the model's hard predictions (validated first)."""
    if y is None:
        if not grad.spec.is_classification:
            raise ValueError(
                f"`y` is required for the loss {grad.spec.name!r}: predictions are only used as labels "
                "for classification losses. Received: y=None"
            )
        x, _ = validation.check_x(grad.ensemble.models[0], x)
        check_range(x, clip_values)
        y = predict_labels(grad, x, batch_size)
    x, labels, _, n = grad.check(x, y)
    check_range(x, clip_values)
    return x, labels, n


def _per_sample(a):
    """Per-sample L2 norms of `a`, shaped to broadcast against it."""
    norms = np.sqrt(np.sum(np.square(a.reshape(len(a), -1)), axis=1))
    return norms.reshape((-1,) + (1,) * (a.ndim - 1))


def _direction(g, norm):
    """Steepest-ascent direction of unit norm: sign(g) for Linf, g / ||g||_2 per sample for L2."""
    if norm == np.inf:
        return np.sign(g)
    return g / np.maximum(_per_sample(g), _TINY)


def _project_and_clip(x, x0, eps, norm, clip_values):
    """Projects x onto the eps-ball around the clean x0, then clips to `clip_values`."""
    e = x0.dtype.type(eps)
    delta = x - x0
    if norm == np.inf:
        delta = np.clip(delta, -e, e)
    else:
        delta = delta * np.minimum(1, e / np.maximum(_per_sample(delta), _TINY))
    x = x0 + delta
    if clip_values is not None:
        x = np.clip(x, x0.dtype.type(clip_values[0]), x0.dtype.type(clip_values[1]))
    return x


def _random_start(x0, eps, norm, rng):
    """A point drawn uniformly from the eps-ball around x0: Linf uniform per coordinate; L2 a gaussian
    direction with radius eps * u^(1/d), d the number of features (Voelker et al. 2017)."""
    n, d = len(x0), int(np.prod(x0.shape[1:]))
    if norm == np.inf:
        delta = rng.uniform(-eps, eps, size=x0.shape)
    else:
        direction = rng.standard_normal((n, d))
        direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), _TINY)
        delta = (direction * (eps * rng.uniform(size=(n, 1)) ** (1.0 / d))).reshape(x0.shape)
    return x0 + delta.astype(x0.dtype)


def run(
    model,
    x,
    y,
    *,
    eps,
    eps_step,
    steps,
    norm,
    clip_values,
    targeted,
    loss,
    batch_size,
    output,
    random_start=False,
    seed=None,
):
    """Validates every argument, then runs the projected gradient loop (see the module docstring).

    `eps_step=SINGLE_STEP` means one step of size `eps` (FGSM). Returns arrays shaped like `x`, in its
    structure, with the model's input dtype.
    """
    eps = check_eps(eps)
    if eps_step is SINGLE_STEP:
        eps_step, steps = eps, 1
    else:
        eps_step, steps = check_eps_step(eps_step), check_steps(steps)
    norm, clip_values = check_norm(norm), check_clip_values(clip_values)
    targeted = validation.check_flag(targeted, "targeted")
    random_start, seed = validation.check_flag(random_start, "random_start"), _check_seed(seed)
    if targeted and y is None:
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    batch_size = validation.check_batch_size(batch_size)
    grad = gradient_for(model, loss=loss, output=output, batch_size=batch_size)
    x0, labels, n = prepare(grad, x, y, clip_values, batch_size)
    if eps == 0:
        return tree.map_structure(np.copy, x0)
    x_adv = x0
    if random_start:
        rng = np.random.RandomState(seed)
        x_adv = tree.map_structure(
            lambda a: _project_and_clip(_random_start(a, eps, norm, rng), a, eps, norm, clip_values), x0
        )
    weights = np.ones(n, np.float32)
    step = -eps_step if targeted else eps_step  # targeted attacks descend the loss of the target

    def update(xa, a, g):
        return _project_and_clip(xa + a.dtype.type(step) * _direction(g, norm), a, eps, norm, clip_values)

    for _ in range(steps):
        g = grad.compute(x_adv, labels, weights, n)
        x_adv = tree.map_structure(update, x_adv, x0, g)
    return x_adv
