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

import keras
import numpy as np
from keras import tree

from gradkit import _checks
from gradkit.attacks import _geometry as geometry
from gradkit.gradients import InputGradient, WeightedEnsemble, as_ensemble, cached, check_x

SINGLE_STEP = object()  # `eps_step` of FGSM: one step of size eps (a user's None is still rejected)


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
        x, _ = check_x(grad.ensemble.models[0], x)
        check_range(x, clip_values)
        y = predict_labels(grad, x, batch_size)
    x, labels, _, n = grad.check(x, y)
    check_range(x, clip_values)
    return x, labels, n


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
    eps = _checks.check_eps(eps)
    if eps_step is SINGLE_STEP:
        eps_step, steps = eps, 1
    else:
        eps_step, steps = _checks.check_eps_step(eps_step), _checks.check_steps(steps)
    norm, clip_values = _checks.check_norm(norm), _checks.check_clip_values(clip_values)
    targeted = _checks.check_flag(targeted, "targeted")
    random_start, seed = _checks.check_flag(random_start, "random_start"), _checks.check_seed(seed)
    if targeted and y is None:
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    batch_size = _checks.check_batch_size(batch_size)
    grad = gradient_for(model, loss=loss, output=output, batch_size=batch_size)
    x0, labels, n = prepare(grad, x, y, clip_values, batch_size)
    if eps == 0:
        return tree.map_structure(np.copy, x0)
    x_adv = x0
    if random_start:
        rng = np.random.RandomState(seed)
        x_adv = tree.map_structure(
            lambda a: geometry.project_and_clip(
                geometry.random_start(a, eps, norm, rng), a, eps, norm, clip_values
            ),
            x0,
        )
    weights = np.ones(n, np.float32)
    step = -eps_step if targeted else eps_step  # targeted attacks descend the loss of the target

    def update(xa, a, g):
        return geometry.project_and_clip(
            xa + a.dtype.type(step) * geometry.direction(g, norm), a, eps, norm, clip_values
        )

    for _ in range(steps):
        g = grad.compute(x_adv, labels, weights, n)
        x_adv = tree.map_structure(update, x_adv, x0, g)
    return x_adv
