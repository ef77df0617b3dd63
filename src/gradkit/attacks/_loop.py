"""The one projected gradient loop behind FGSM, BIM and PGD (Madry et al. 2018).

Start at the clean input x0 (or at a random point of the eps-ball around it), then `steps` times: take
the input gradient of the objective, move `eps_step` along its sign (Linf) or its per-sample unit-L2
direction (L2), project onto the eps-ball around the CLEAN input x0 and clip to `clip_values`
(`_geometry.py`). Each step is one compiled call for all ensemble members that also does the move, the
projection, the clip and the best-iterate record on the device (`_engine.py`): nothing returns to numpy
between steps. The step loop stays in Python, since a loop of compiled steps measured 7.5x faster on
CPU than one fused `jax.lax.fori_loop`. (A regression loss, or an ensemble with normalize_gradients,
has no classifier objective: its loop takes `InputGradient`'s numpy gradients.)

Success is judged on the model's real decision rule (argmax; an ensemble's weighted hard vote) at every
iterate, from the logits the step call returns anyway: with `keep="first_success"` each sample keeps the
first iterate that fooled the rule, else the iterate with the highest objective (the "silent success" of
Pintor et al. 2022 is never lost). `keep="last"` returns the last iterate, as classic implementations do.
"""

import numpy as np
from keras import ops, tree

from gradkit import _checks, backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import _geometry as geometry
from gradkit.attacks._prepare import gradient_for, prepare, step_for

SINGLE_STEP = object()  # `eps_step` of FGSM: one step of size eps (a user's None is still rejected)
KEEP = ("first_success", "last")


def _check(eps, eps_step, steps, norm, clip_values, targeted, random_start, seed, keep, batch_size):
    eps = _checks.check_eps(eps)
    if eps_step is SINGLE_STEP:
        eps_step, steps = eps, 1
    else:
        eps_step, steps = _checks.check_eps_step(eps_step), _checks.check_steps(steps)
    norm = _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    return dict(
        eps=eps, eps_step=eps_step, steps=steps, norm=norm,
        clip_values=_checks.check_clip_values(clip_values), targeted=_checks.check_flag(targeted, "targeted"),
        random_start=_checks.check_flag(random_start, "random_start"), seed=_checks.check_seed(seed),
        keep=_checks.check_choice(keep, "keep", KEEP), batch_size=_checks.check_batch_size(batch_size),
    )  # fmt: skip


def run(model, x, y, *, eps, eps_step, steps, norm, clip_values, targeted, loss, batch_size, output,
        random_start=False, seed=None, objective="loss_sum", keep="last", temperature=1.0, eot_iter=1,
        surrogate=None):  # fmt: skip
    """Validates every argument, then runs the projected gradient loop (see the module docstring).

    `eps_step=SINGLE_STEP` means one step of size `eps` (FGSM). Returns arrays shaped like `x`, in its
    structure, with the model's input dtype.
    """
    a = _check(eps, eps_step, steps, norm, clip_values, targeted, random_start, seed, keep, batch_size)
    if a["targeted"] and y is None:
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    if a["targeted"] and loss == "dlr":
        raise ValueError(
            'loss="dlr" with targeted=True needs the true labels too: use gradkit.apgd(targeted=True).'
        )
    grad = gradient_for(model, loss=loss, output=output, batch_size=a["batch_size"])
    step = step_for(model, grad, loss=loss, objective=objective, targeted=a["targeted"], output=output,
                    batch_size=a["batch_size"], temperature=temperature, eot_iter=eot_iter,
                    surrogate=surrogate)  # fmt: skip
    x0, labels, n = prepare(grad, x, y, a["clip_values"], a["batch_size"])
    if a["eps"] == 0:
        return tree.map_structure(np.copy, x0)
    x_adv = _iterate(grad, step, x0, labels, n, a)
    return tree.map_structure(lambda xa, x: geometry.inside(xa, x, a["eps"], a["norm"]), x_adv, x0)


def _start(x0, a):
    if not a["random_start"]:
        return x0
    rng = np.random.RandomState(a["seed"])

    def draw(x):
        return geometry.project_and_clip(geometry.random_start(x, a["eps"], a["norm"], rng), x, a["eps"],
                                         a["norm"], a["clip_values"])  # fmt: skip

    return tree.map_structure(draw, x0)


def _iterate(grad, step, x0, labels, n, a):
    if step is not None:
        return _on_device(step, _start(x0, a), x0, labels, a)
    x_adv = _start(x0, a)
    eps, norm, clip_values = a["eps"], a["norm"], a["clip_values"]
    size = -a["eps_step"] if a["targeted"] else a["eps_step"]  # a targeted attack descends the loss
    weights = np.ones(n, np.float32)

    def update(xa, x, g):
        moved = xa + x.dtype.type(size) * geometry.direction(g, norm)
        return geometry.project_and_clip(moved, x, eps, norm, clip_values)

    for _ in range(a["steps"]):
        x_adv = tree.map_structure(update, x_adv, x0, grad.compute(x_adv, labels, weights, n))
    return x_adv


def _pgd_update(step, norm, targeted, track, clip):
    """The device step's update: record the iterate the gradient was taken at (first success, else
    the best objective; not the clean start), then move, project onto the ball and clip."""

    def update(state, aux, grad, fixed):
        values, logits = aux
        new = dict(state)
        if track:
            decided = step.decide_tensor(logits, fixed["weights"]["alpha"])
            hit = decided == fixed["y"][0] if targeted else decided != fixed["y"][0]
            record, old = state["record"], state["success"]
            hit = ops.logical_and(hit, record)
            higher = ops.logical_and(ops.logical_not(ops.logical_or(old, hit)), values > state["value"])
            take = ops.logical_and(record, ops.logical_or(ops.logical_and(hit, ops.logical_not(old)), higher))
            new["value"] = ops.where(take, values, state["value"])
            new["success"] = ops.logical_or(old, hit)
            new["best"] = engine.select_rows(take, state["x"], state["best"])
            new["record"] = ops.ones_like(record)
        bounds = (fixed["lo"], fixed["hi"]) if clip else None

        def move(x, x0, g):
            return geometry.step_tensor(x, x0, g, fixed["size"], fixed["eps"], norm, bounds)

        new["x"] = tree.map_structure(move, state["x"], fixed["x0"], grad)
        return new

    return update


def _on_device(step, x_start, x0, labels, a):
    """The loop of compiled steps (`_engine.py`); with `keep="first_success"` one more step evaluates
    the last iterate (its move is not used)."""
    norm, targeted, clip = a["norm"], a["targeted"], a["clip_values"] is not None
    track = a["keep"] == "first_success"
    update = _pgd_update(step, norm, targeted, track, clip)
    compiled = step.step_function("pgd", update, norm=norm, targeted=targeted, track=track, clip=clip)
    lo, hi = a["clip_values"] or (0.0, 0.0)
    constants = {k: engine.scalar(v) for k, v in dict(eps=a["eps"], size=a["eps_step"], lo=lo, hi=hi).items()}
    n = len(labels)

    def init(start, stop, pad):
        state = {"x": step.batch_rows(x_start, start, stop, pad)}
        if track:
            state["best"] = state["x"]
            state["value"] = step.batch_rows(np.full(n, -np.inf, np.float32), start, stop, pad)
            state["success"] = step.batch_rows(np.zeros(n, bool), start, stop, pad)
            state["record"] = backend.to_tensor(np.asarray(a["random_start"]))
        return state, {"x0": step.batch_rows(x0, start, stop, pad)}

    def finish(state, rows):
        return engine.to_host(state["best"] if track else state["x"], rows)

    parts = engine.run(step, compiled, labels, labels if targeted else None, constants, init,
                       a["steps"] + int(track), finish)  # fmt: skip
    return tree.map_structure(lambda *p: np.concatenate(p), *parts)
