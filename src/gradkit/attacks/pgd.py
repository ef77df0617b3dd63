"""FGSM, BIM and PGD: one projected gradient loop (Goodfellow et al. 2015; Kurakin et al. 2017; Madry et
al. 2018), for the Linf, L2 and L1 threat models.

Algorithm. Start at the clean input x0, or (PGD) at a uniformly random point of the eps-ball around it;
then `steps` times:

    x_{k+1} = clip( P_eps(x0)( x_k + eps_step * dir(grad_x L(x_k)) ) )

with `dir` the steepest-ascent direction of the norm, `argmax_{||d|| <= 1} <g, d>`: the sign (Linf),
the per-sample unit-L2 direction (L2), and for L1 the whole step on the coordinate of largest |g| (the
dual-norm maximizer, as in ART 1.20's FastGradientMethod, fixed in ART PR #2382; foolbox 3.3's L1 step
`g / ||g||_1` spreads the step and is weaker). With `clip_values` the L1 step is the steepest one
inside the box (`geometry.steepest_l1_tensor`: a coordinate at the box's edge passes the rest of the
step to the next largest |g|). `P_eps(x0)` is the projection onto the eps-ball around the CLEAN input
and `clip` the clip to `clip_values` (L1: the exact projection onto the L1-ball and the box,
`geometry.project_l1_box`).
FGSM is one BIM step with `eps_step = eps`; BIM is PGD without random start; a targeted attack
descends the loss of the target.

Success is judged on the model's real decision rule (argmax; an ensemble's weighted hard vote) at
every iterate, from the logits the step call returns anyway: with `keep="first_success"` each sample
keeps the first iterate that fooled the rule, else the iterate of highest objective (the "silent
success" of Pintor et al. 2022 is never lost); `keep="last"` returns the last iterate, as classic
implementations do. Each step is one compiled call (`_engine.py`) for all ensemble members that also
moves, projects, clips and records on the device. A loss without an on-device objective (a regression
loss, or an ensemble with `normalize_gradients`) runs the same loop on the host over `InputGradient`'s
gradients.

References:
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572
    Kurakin, Goodfellow & Bengio (2017), "Adversarial examples in the physical world", ICLR workshop,
    https://arxiv.org/abs/1607.02533; "Adversarial machine learning at scale", ICLR (label leaking),
    https://arxiv.org/abs/1611.01236
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083
    Voelker, Gosmann & Stewart (2017), "Efficiently sampling vectors and coordinates from the n-sphere
    and n-ball", http://compneuro.uwaterloo.ca/files/publications/voelker.2017.pdf
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (the L1-ball and box projection, Lemma 3.1)
"""

import numpy as np
from keras import ops, tree

from gradkit import _checks, backend
from gradkit.attacks import _engine as engine
from gradkit.attacks import _inputs, geometry
from gradkit.attacks._frame import Frame, check_clip, check_eps, step_function

SINGLE_STEP = object()  # `eps_step` of FGSM: one step of size eps (a user's None is still rejected)
KEEP = ("first_success", "last")


def fgsm(
    model,
    x,
    y=None,
    *,
    eps,
    norm=np.inf,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    targeted=False,
    loss=None,
    batch_size=None,
    output=None,
    preprocessing=None,
):
    """Fast Gradient (Sign) Method: `x + eps * sign(grad_x L(y, f(x)))`, clipped to `clip_values`.

    FGSM is one BIM step with `eps_step = eps` and no random start, so it equals
    `bim(model, x, y, eps=eps, eps_step=eps, steps=1, ...)`. With `norm=2` the step is
    `eps * g / ||g||_2` per sample (the fast gradient method); with `norm=1` it is the L1 steepest
    ascent: all of eps on the coordinate of largest `|g_i|`, with its sign (the maximizer of `<g, d>`
    over the L1 ball, as ART's FastGradientMethod; ties go to the first coordinate in row-major order),
    and inside `clip_values` the steepest step within the box: where that coordinate reaches the box's
    edge, the rest goes to the next largest `|g_i|`. On a linear model this is the exact L1 worst case.
    A zero gradient gives a zero step.

    Args:
        model: a built Keras classifier, a `gradkit.WeightedEnsemble` (its gradient is
            sum_k alpha_k grad_k, all members in one compiled call) or an object with `as_ensemble()`
            (the boosting estimators). It runs in inference mode and none of its variables change.
        x: float array `(n, *input_shape)` in the model's input units (a model with a Rescaling layer
            inside takes raw units), or a list/dict of arrays for a multi-input model; each input is
            perturbed within its own eps-ball.
        y: class ids `(n,)` or one-hot `(n, n_classes)`: the true labels (untargeted) or the target
            classes (targeted). Defaults to None: the model's hard predictions (for an ensemble the
            weighted hard vote), which avoids label leaking (Kurakin et al. 2017).
        eps: size of the perturbation, a finite float >= 0 in input units; `eps=0` returns a copy of
            `x`. Linf: or a per-feature budget, an array >= 0 broadcastable to one input's shape
            (several inputs: a dict `{name: eps}`); ValueError with another norm.
        norm: `np.inf` (or "inf", "linf"; default), `2` (or "l2") or `1` (or "l1").
        clip_values: None (default, no clipping) or `(min, max)` floats: the valid input range; `x`
            must lie inside it and the result is clipped to it. Or per feature `(lo, hi)` arrays
            broadcastable to one input's shape (several inputs: one pair, or a dict `{name: (lo, hi)}`).
        mask: None (default) or a 0/1 array broadcastable to one input's shape (several inputs: a dict
            `{name: mask}`): 1 where a feature may change. The others stay bit-identical through the
            start, every step and projection (their gradient is zeroed, so norms and directions count
            only the changeable features).
        attack_inputs: None (default: every input) or the names of the inputs of a model of several
            inputs that may change; the others are held fixed. With it, a mask or per-feature or
            per-input values, several inputs are attacked as one flat row (`gradkit.attacks.FlatInputs`:
            Linf balls per input, one joint L2/L1 ball).
        targeted: False (default) increases the loss of `y`; True decreases it (moves towards `y`).
        loss: None (the model's compiled loss) or a loss as in `gradkit.InputGradient`.
        batch_size: rows per compiled call; None (default) attacks all of `x` in one call.
        output: name or index of the attacked output of a multi-output model; only its loss counts.
        preprocessing: None (default), `(mean, std)` (floats or arrays broadcastable to one input's
            shape; a `(C,)` vector is the channels-last axis) or a callable / Keras layer on tensors: the
            model sees `(x - mean) / std` (or `preprocessing(x)`), applied inside the compiled function,
            while eps, `clip_values` and the returned points stay in the units of `x` (pixels). The
            wrapped model is built once per model and preprocessing (`gradkit.gradients.preprocessed`).

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: eps < 0, a bad `norm` or `clip_values`, `x` outside `clip_values`, soft or
            out-of-range labels, `targeted=True` without `y`, NaN in `x`; all before any work.
        TypeError: integer inputs (no input gradient exists), a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Goodfellow, Shlens & Szegedy (2015), https://arxiv.org/abs/1412.6572; Kurakin, Goodfellow &
        Bengio (2017), https://arxiv.org/abs/1611.01236 (label leaking).

    Example:
        >>> x_adv = gradkit.fgsm(model, x_test, y_test, eps=0.1, clip_values=(0, 1))  # doctest: +SKIP
    """
    return projected_loop(
        model,
        x,
        y,
        eps=eps,
        eps_step=SINGLE_STEP,
        steps=1,
        norm=norm,
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        targeted=targeted,
        loss=loss,
        batch_size=batch_size,
        output=output,
        preprocessing=preprocessing,
    )


def bim(
    model,
    x,
    y=None,
    *,
    eps,
    eps_step,
    steps,
    norm=np.inf,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    targeted=False,
    loss=None,
    batch_size=None,
    output=None,
    objective="loss_sum",
    keep="first_success",
    preprocessing=None,
):
    """Basic Iterative Method (iterative FGSM): `steps` steps of size `eps_step`, no random start.

    Each step moves `eps_step` along sign(g) (Linf), g / ||g||_2 (L2) or, for L1, along the coordinate
    of largest |g| (the L1 steepest ascent inside the box, see `gradkit.fgsm`) per sample (a zero
    gradient gives a zero step), projects the perturbation onto the eps-ball around the CLEAN input
    (Linf: clip each coordinate to [-eps, eps]; L2: scale the whole per-sample perturbation down to norm
    eps) and clips to `clip_values`. L1 instead projects exactly onto the L1-ball intersected with the
    box (Croce & Hein 2021, Lemma 3.1: soft-thresholding clipped to the box), the closest point that
    is inside both; a rescaling followed by a clip is not (foolbox rescales). For sparse L1 attacks
    prefer `gradkit.apgd(norm=1)`, whose step moves the top fraction of coordinates.

    BIM is PGD without random start. Each step is one compiled gradient call for all ensemble members;
    the step loop runs in Python.

    Args:
        model, x, y, norm, clip_values, mask, attack_inputs, targeted, loss, batch_size, output: as in
            `gradkit.fgsm`.
        eps: radius of the ball around `x`, a finite float >= 0 in input units; `eps=0` returns a copy
            of `x`. Linf: or per feature, as in `gradkit.fgsm`.
        eps_step: step size, a finite float > 0 (commonly eps / steps to 2.5 * eps / steps).
        steps: number of steps, an int >= 1.
        objective: how an ensemble's members are combined into the objective: "loss_sum" (default,
            sum_k alpha_k L_k, the gradient of the original boosting attacks), "logit_mean" (L of the
            weighted mean logits), "prob_mean" (L of the weighted mean probabilities) or "vote_margin"
            (a margin on the softmax-smoothed weighted vote, which follows a boosted model's real hard
            vote). On a single model the first three are the same objective (L of its own output), and
            "vote_margin" is the margin of its softmax.
        keep: "first_success" (default): each sample keeps the first iterate that fooled the real
            decision rule (argmax; an ensemble's weighted hard vote), else the iterate with the highest
            objective; "last": the last iterate, as classic implementations return.
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: eps < 0, eps_step <= 0, steps < 1, a bad `norm` or `clip_values`, `x` outside
            `clip_values`, soft or out-of-range labels, `targeted=True` without `y`; before any work.
        TypeError: a non-integer `steps`, integer inputs, a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Kurakin, Goodfellow & Bengio (2017), https://arxiv.org/abs/1607.02533; Croce & Hein (2021),
        https://arxiv.org/abs/2103.01208 (the L1-ball and box projection, Lemma 3.1).

    Example:
        >>> x_adv = gradkit.bim(model, x, y, eps=0.1, eps_step=0.01, steps=20)  # doctest: +SKIP
    """
    return projected_loop(
        model,
        x,
        y,
        eps=eps,
        eps_step=eps_step,
        steps=steps,
        norm=norm,
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        targeted=targeted,
        loss=loss,
        batch_size=batch_size,
        output=output,
        objective=objective,
        keep=keep,
        preprocessing=preprocessing,
    )


def pgd(
    model,
    x,
    y=None,
    *,
    eps,
    eps_step,
    steps,
    norm=np.inf,
    clip_values=None,
    mask=None,
    attack_inputs=None,
    targeted=False,
    loss=None,
    batch_size=None,
    output=None,
    objective="loss_sum",
    keep="first_success",
    random_start=True,
    seed=None,
    preprocessing=None,
):
    """Projected Gradient Descent: BIM started at a uniformly random point of the eps-ball.

    The random start is drawn with `numpy.random.RandomState(seed)`, so a seeded run repeats exactly on
    every backend: Linf draws each coordinate uniformly in [-eps, eps]; L2 draws uniformly in the ball
    (a gaussian direction with radius eps * u^(1/d), u uniform in [0, 1), d the number of features of
    the input); L1 draws uniformly in the ball (d of d + 1 exponential draws over their sum, random
    signs; Barthe et al. 2005). The start is clipped to `clip_values`. Then `steps` BIM steps follow (see
    `gradkit.bim`); with `random_start=False` PGD equals BIM exactly.

    Args:
        model, x, y, norm, clip_values, mask, attack_inputs, targeted, loss, batch_size, output: as in
            `gradkit.fgsm`.
        eps, eps_step, steps: as in `gradkit.bim` (a common choice: eps_step = 2.5 * eps / steps).
        random_start: start from a random point of the ball (default True) or from `x`.
        seed: None (default: fresh randomness) or an int >= 0 seeding the random start.
        objective, keep: as in `gradkit.bim`.
        preprocessing: None (default), `(mean, std)` or a callable applied to `x` before the model, as in
            `gradkit.fgsm` (eps, `clip_values` and the result in the units of `x`).

    Returns:
        Adversarial examples shaped like `x` (same structure), dtype of the model input (float32).

    Raises:
        ValueError: as in `gradkit.bim`, and a bad `seed`; before any work.
        TypeError: a non-integer `steps`, a non-bool `random_start`, integer inputs, a bad `model`.
        NotImplementedError: a `keras.distribution` is active on TensorFlow or PyTorch (JAX only).

    References:
        Madry, Makelov, Schmidt, Tsipras & Vladu (2018), https://arxiv.org/abs/1706.06083; Voelker,
        Gosmann & Stewart (2017) (uniform in the L2 ball).

    Example:
        >>> x_adv = gradkit.pgd(model, x, y, eps=0.1, eps_step=0.025, steps=10, seed=0)  # doctest: +SKIP
    """
    return projected_loop(
        model,
        x,
        y,
        eps=eps,
        eps_step=eps_step,
        steps=steps,
        norm=norm,
        clip_values=clip_values,
        mask=mask,
        attack_inputs=attack_inputs,
        targeted=targeted,
        loss=loss,
        batch_size=batch_size,
        output=output,
        objective=objective,
        keep=keep,
        random_start=random_start,
        seed=seed,
        preprocessing=preprocessing,
    )


def _check(eps, eps_step, steps, norm, clip_values, targeted, random_start, seed, keep, batch_size):
    eps = _checks.check_eps(eps) if np.ndim(eps) == 0 else eps
    norm = _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS)
    eps = check_eps(eps, norm)
    if eps_step is SINGLE_STEP:
        eps_step, steps = eps, 1
    else:
        eps_step, steps = _checks.check_eps_step(eps_step), _checks.check_steps(steps)
    return dict(
        eps=eps,
        eps_step=eps_step,
        steps=steps,
        norm=norm,
        clip_values=check_clip(clip_values),
        targeted=_checks.check_flag(targeted, "targeted"),
        random_start=_checks.check_flag(random_start, "random_start"),
        seed=_checks.check_seed(seed),
        keep=_checks.check_choice(keep, "keep", KEEP),
        batch_size=_checks.check_batch_size(batch_size),
    )


def projected_loop(
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
    mask=None,
    random_start=False,
    seed=None,
    objective="loss_sum",
    keep="last",
    temperature=1.0,
    eot_iter=1,
    surrogate=None,
    preprocessing=None,
    attack_inputs=None,
):
    """Validates every argument, then runs the projected gradient loop (see the module docstring).

    `eps_step=SINGLE_STEP` means one step of size `eps` (FGSM). Returns arrays shaped like `x`, in its
    structure, with the model's input dtype. Several inputs with `attack_inputs`, a mask, per-feature or
    per-input bounds or per-input eps are attacked as one flat row (`_inputs.FlatInputs`).
    """
    flat = None
    if _inputs.is_several(model, x) and _per_input(eps, clip_values, mask, attack_inputs):
        flat = _inputs.FlatInputs(model, x, attack_inputs=attack_inputs, clip_values=clip_values, mask=mask)
        model, x, clip_values, mask = flat.model, flat.x, flat.clip_values, flat.mask
        eps = flat.eps(eps, _checks.check_norm(norm, allowed=_checks.GRADIENT_NORMS))
    a = _check(eps, eps_step, steps, norm, clip_values, targeted, random_start, seed, keep, batch_size)
    if a["targeted"] and y is None:
        raise ValueError("`y` (the target classes) is required when targeted=True. Received: y=None")
    if a["targeted"] and loss == "dlr":
        raise ValueError(
            'loss="dlr" with targeted=True needs the true labels too: use gradkit.apgd(targeted=True).'
        )
    frame = Frame(
        model,
        x,
        y,
        loss=loss,
        clip_values=a["clip_values"],
        mask=mask,
        batch_size=a["batch_size"],
        output=output,
        objective=objective,
        targeted=a["targeted"],
        temperature=temperature,
        eot_iter=eot_iter,
        surrogate=surrogate,
        preprocessing=preprocessing,
        attack_inputs=None if flat else attack_inputs,
    )
    frame.inputs = flat
    if not np.any(a["eps"]):
        return frame.finish(tree.map_structure(np.copy, frame.x0))
    a["clip_values"], a["mask"] = frame.clip_values, frame.mask  # broadcast to one input's shape
    if frame.objective is None:
        x_adv = _on_host(frame, a)
    else:
        x_adv = _on_device(frame, a)
    x_adv = tree.map_structure(lambda xa, x: geometry.inside(xa, x, a["eps"], a["norm"]), x_adv, frame.x0)
    return frame.finish(x_adv)


def _per_input(eps, clip_values, mask, attack_inputs):
    """Whether several inputs need the flat row: input names, a mask, per-input or per-feature values."""
    if (
        attack_inputs is not None
        or mask is not None
        or isinstance(eps, dict)
        or isinstance(clip_values, dict)
    ):
        return True
    return isinstance(clip_values, (tuple, list)) and any(np.ndim(b) for b in clip_values)


def _update(frame, norm, targeted, track, clip):
    """The step: record the iterate the gradient was taken at (first success, else the best objective;
    not the clean start), then move, project onto the ball and clip (`step`)."""
    objective = frame.objective

    def update(state, aux, grad, fixed):
        values, logits = aux
        new = dict(state)
        if track:
            decided = objective.decide_tensor(logits, fixed["weights"]["alpha"])
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
            return step(x, x0, g, fixed["size"], fixed["eps"], norm, bounds)

        new["x"] = tree.map_structure(move, state["x"], fixed["x0"], grad)
        return new

    return update


def step(x, x0, g, size, eps, norm, bounds):
    """One projected gradient step on backend tensors: `x + size * dir(g)` projected onto the ball
    around `x0` and clipped (`geometry.project_and_clip_tensor`; `size` negative descends). `g` must be
    the step's own gradient, used by nothing else: the Linf step may be computed in its memory
    (`backend.linf_step`, the same values)."""
    if norm == np.inf:
        return engine.fast_path("linf_step", _linf_step)(x, x0, g, size, eps, bounds)
    size = ops.cast(size, x.dtype)
    if norm == 1:  # the steepest step inside the box, from x
        lo = hi = None
        if bounds is not None:
            lo, hi = ops.cast(bounds[0], x.dtype) - x, ops.cast(bounds[1], x.dtype) - x
        moved = x + geometry.steepest_l1_tensor(ops.sign(size) * g, ops.abs(size), lo, hi)
    else:
        moved = x + size * geometry.direction_tensor(g, norm)
    return geometry.project_and_clip_tensor(moved, x0, eps, norm, bounds)


def _linf_step(x, x0, g, size, eps, bounds):
    """The Linf step in `keras.ops` (what `backend.linf_step` computes in place)."""
    moved = x + ops.cast(size, x.dtype) * ops.sign(g)
    return geometry.project_and_clip_tensor(moved, x0, eps, np.inf, bounds)


def _start(x0, a):
    if not a["random_start"]:
        return x0
    rng = np.random.RandomState(a["seed"])

    def draw(x):
        start = geometry.random_start(x, a["eps"], a["norm"], rng)
        return geometry.project_and_clip(start, x, a["eps"], a["norm"], a["clip_values"], a["mask"])

    return tree.map_structure(draw, x0)


def _on_device(frame, a):
    """The loop of compiled steps (`_engine.py`); with `keep="first_success"` one more step evaluates
    the last iterate (its move is not used)."""
    norm, targeted, clip = a["norm"], a["targeted"], a["clip_values"] is not None
    track = a["keep"] == "first_success"
    objective, x0, labels = frame.objective, frame.x0, frame.labels
    x_start = _start(x0, a)
    compiled = step_function(
        objective,
        "pgd",
        _update(frame, norm, targeted, track, clip),
        frame.mask,
        norm=norm,
        targeted=targeted,
        track=track,
        clip=clip,
    )
    lo, hi = a["clip_values"] or (0.0, 0.0)
    constants = {k: engine.scalar(v) for k, v in dict(eps=a["eps"], size=a["eps_step"], lo=lo, hi=hi).items()}
    constants.update(frame.tensors())
    n = len(labels)

    def init(start, stop, pad):
        state = {"x": objective.batch_rows(x_start, start, stop, pad)}
        if track:
            state["best"] = state["x"]
            state["value"] = objective.batch_rows(np.full(n, -np.inf, np.float32), start, stop, pad)
            state["success"] = objective.batch_rows(np.zeros(n, bool), start, stop, pad)
            state["record"] = backend.to_tensor(np.asarray(a["random_start"]))
        return state, {"x0": objective.batch_rows(x0, start, stop, pad)}

    def finish(state, rows):
        return engine.to_host(state["best"] if track else state["x"], rows)

    parts = engine.run(
        objective,
        compiled,
        labels,
        labels if targeted else None,
        constants,
        init,
        a["steps"] + int(track),
        finish,
    )
    return tree.map_structure(lambda *p: np.concatenate(p), *parts)


def _on_host(frame, a):
    """The loop over `InputGradient`'s numpy gradients, for objectives without an on-device version."""
    x0, labels, n = frame.x0, frame.labels, frame.n
    x_adv = _start(x0, a)
    eps, norm, clip_values = a["eps"], a["norm"], a["clip_values"]
    size = -a["eps_step"] if a["targeted"] else a["eps_step"]  # a targeted attack descends the loss
    weights = np.ones(n, np.float32)

    def update(xa, x, g):
        g = g if a["mask"] is None else g * a["mask"]  # no step on the features held fixed
        if norm == 1:  # the steepest step inside the box, as on the device
            lo, hi = (None, None) if clip_values is None else (clip_values[0] - xa, clip_values[1] - xa)
            moved = xa + geometry.steepest_l1(np.sign(size) * g, abs(size), lo, hi).astype(xa.dtype)
        else:
            moved = xa + x.dtype.type(size) * geometry.direction(g, norm)
        return geometry.project_and_clip(moved, x, eps, norm, clip_values)

    for _ in range(a["steps"]):
        x_adv = tree.map_structure(update, x_adv, x0, frame.grad.compute(x_adv, labels, weights, n))
    return x_adv
