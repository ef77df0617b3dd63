"""`gradkit.selftest`: the binarization test of Zimmermann, Brendel, Tramer & Carlini (2022), an
evaluation that proves its own strength on the model at hand.

Per test point x, the classifier's last linear layer is replaced by a binary readout trained on the
penultimate features of `n_inner` points inside the eta * eps ball (x itself included, class 0) and
`n_boundary` points at distance eps (class 1). When the readout separates them, an adversarial example
of the binarized model provably lies inside the eps-ball (the boundary points), so an attack strong
enough for this model breaks every binarized model; one it misses shows the attack too weak here.
"""

import time

import keras
import numpy as np
from tqdm.auto import tqdm

from gradkit import _checks
from gradkit import attacks as registry
from gradkit.evaluation import _plan
from gradkit.evaluation import _selftest_readout as readout
from gradkit.evaluation._selftest_result import SelfTest
from gradkit.evaluation._suite import evaluate
from gradkit.gradients import cached


def selftest(
    model,
    x,
    y,
    *,
    eps,
    norm=np.inf,
    attack="standard",
    n_inner=999,
    n_boundary=1,
    eta=0.95,
    clip_values=None,
    surrogate=None,
    seed=0,
    batch_size=None,
    steps=100,
    n_queries=5000,
    verbose=1,
):
    """The binarization test: does `attack` find the adversarial example every binarized model has?

    For each point `x[i]`: `n_inner - 1` points are drawn uniformly inside the `norm` ball of radius
    `eta * eps` (a box for Linf) and, with `x[i]` itself, labelled 0; `n_boundary` points are drawn on
    the eps-sphere (L2) or the box's surface (Linf), labelled 1 (all clipped to `clip_values`). A
    logistic-regression readout on the features that `model`'s last Dense layer reads replaces that
    layer (two logits, their difference d spanning [-1, 1] on these points). When it separates the two
    classes, `gradkit.evaluate` runs `attack` on `x[i]` (label 0) against the binarized model, at the same
    `eps`, `norm` and `clip_values`: success is an example classified 1. A readout that does not separate
    is a failed setup (reported, not tested). The test passes when every tested point was broken.

    The normalized logit-difference improvement of a point is (d(x_adv) - d_b) / d_b, with d_b the
    largest d over the boundary points: >= 0 when the attack found an example at least as confident as
    the training point that proves one exists.

    Args:
        model: a Sequential or Functional Keras classifier whose output is a Dense layer (optionally
            followed by `Activation` or `Softmax` layers, which the binarized model drops).
        x: float array `(n, ...)`, the test points.
        y: int class ids `(n,)` (or one-hot `(n, C)`), the true labels: each record says whether `model`
            classified its point correctly (`correct`); the binarized task does not use them.
        eps: float > 0, the perturbation budget in `norm`.
        norm: `np.inf` (or "inf", "linf") or 2 (or "l2"). Defaults to `np.inf`.
        attack: what `gradkit.evaluate`'s `attacks=` takes: "standard" (default; on the two-class
            binarized model APGD-CE and Square, as APGD-T and FAB-T need more classes), "plus", "rand",
            an attack name of `gradkit.attacks.NAMES` or a list of them.
        n_inner: int >= 1, the inner points per test point, the clean one included. Defaults to 999.
        n_boundary: int >= 1, the boundary points per test point. Defaults to 1.
        eta: float in (0, 1], the inner points' radius as a share of eps. Defaults to 0.95.
        clip_values: `(min, max)` input range, or None (default) for none.
        surrogate: None (default), or a Keras model of the same form as `model` (its last Dense layer
            reading features of the same size), for BPDA: binarized with the same readout, it is the
            `surrogate=` of each evaluation (e.g. `model` with its non-differentiable step replaced by
            the identity).
        seed: int >= 0 or None: the sampled points of `x[i]` come from numpy's generator seeded
            `[seed, i]`, and each evaluation gets `seed`. Defaults to 0.
        batch_size: rows per compiled call, or None (default: all at once).
        steps: int >= 1, the iterations of APGD and FAB-T of each evaluation. Defaults to 100.
        n_queries: int >= 1, Square's query budget of each evaluation. Defaults to 5000.
        verbose: 0 silent; >= 1 (default) a tqdm progress bar over the points.

    Returns:
        `SelfTest`: `passed`, `success_rate` (over the points whose readout separated), one record per
        point in `points`, the indices whose readout did not separate in `failed_setups`, and the mean
        normalized logit-difference improvement; `print(result)` shows the table and PASS or FAIL.

    Raises:
        ValueError: a `model` or `surrogate` without a last Dense layer (or with features of another
            size), eps <= 0, a norm other than Linf or L2, n_inner or n_boundary < 1, eta outside (0, 1],
            an unknown attack or one the two-class binarized model has too few classes for, `x` outside
            `clip_values`, or what `gradkit.evaluate` refuses; all before any attack runs.
        TypeError: arguments of the wrong type.

    References:
        Zimmermann, Brendel, Tramer & Carlini (2022), "Increasing confidence in adversarial robustness
        evaluations", NeurIPS, https://arxiv.org/abs/2206.13991 (sec. 4; the authors' code:
        https://github.com/google-research/active-adversarial-tests,
        `active_tests/decision_boundary_binarization.py`)
        Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security", ICML,
        https://arxiv.org/abs/1802.00420 (BPDA)
    """
    start = time.perf_counter()
    features_in, features = readout.penultimate(model)
    x, labels, _ = _plan.check_data(model, x, y)
    sizes = {
        "n_inner": _checks.check_int(n_inner, "n_inner", minimum=1),
        "n_boundary": _checks.check_int(n_boundary, "n_boundary", minimum=1),
    }
    eta = _checks.check_real(eta, "eta", minimum=0, strict=True, maximum=1)
    extractor, head, binarized = cached(model, "selftest", lambda: _binarized(model, features_in, features))
    config = _config(binarized, attack, eps, norm, clip_values, batch_size, seed, n_queries, steps, verbose)
    _plan.check_range(x, config.clip_values)
    surrogate = _surrogate_features(surrogate, features)
    options = {
        "eps": config.eps,
        "norm": config.norm,
        "attacks": attack,
        "clip_values": config.clip_values,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "steps": config.steps,
        "n_queries": config.n_queries,
        "verbose": 0,
    }
    correct = registry.decide(model, x, config.batch_size) == labels
    records = []
    with tqdm(total=len(x), desc="selftest", unit="point", disable=config.verbose == 0) as bar:
        for i in range(len(x)):
            sampled = _sample(x[i], i, config, eta, sizes)
            models = (extractor, head, binarized, surrogate)
            records.append(_test_point(i, sampled, bool(correct[i]), models, options, sizes["n_inner"]))
            bar.update(1)
            tested = [r["success"] for r in records if r["separated"]]
            bar.set_postfix(success=f"{np.mean(tested):.3f}" if tested else "-")
    return SelfTest.of(
        records,
        eps=config.eps,
        norm=config.norm,
        attack=attack if isinstance(attack, str) else [getattr(a, "__name__", a) for a in attack],
        eta=eta,
        backend=keras.backend.backend(),
        seconds=time.perf_counter() - start,
        **sizes,
    )


def _config(binarized, attack, eps, norm, clip_values, batch_size, seed, n_queries, steps, verbose):
    """`evaluate`'s checked configuration on the binarized model (two classes), its errors naming
    `attack`; eps must be > 0 and the norm Linf or L2."""
    eps = _checks.check_real(eps, "eps", minimum=0, strict=True)  # boundary points at distance eps
    try:
        return _plan.check_config(
            binarized,
            2,
            attacks=attack,
            eps=eps,
            norm=_checks.check_norm(norm, allowed=(np.inf, 2)),
            clip_values=clip_values,
            batch_size=batch_size,
            seed=seed,
            n_queries=n_queries,
            steps=steps,
            verbose=verbose,
        )
    except (ValueError, TypeError) as error:
        message = str(error).replace("`attacks", "`attack").replace("Received: attacks", "Received: attack")
        if "classes" in message:
            message += " (the binarized models have two classes)"
        raise type(error)(message) from None


def _binarized(model, features_in, features):
    """`(extractor, head, binarized)`: the model up to its features, the two-unit readout, and both."""
    head = keras.layers.Dense(2, name="binary_readout")
    binarized = keras.Model(features_in, head(features), name=f"{model.name}_binarized")
    return keras.Model(features_in, features, name=f"{model.name}_features"), head, binarized


def _surrogate_features(surrogate, features):
    """`(input, features)` of `surrogate`, checked to match the model's `features`, or None."""
    if surrogate is None:
        return None
    if not isinstance(surrogate, keras.Model):
        _checks.fail("surrogate", "None or a Keras model of the same form as `model`", surrogate, TypeError)
    inputs, its = readout.penultimate(surrogate, "surrogate")
    if its.shape[-1] != features.shape[-1]:
        _checks.fail(
            "surrogate",
            f"a model whose last Dense layer reads {features.shape[-1]} features, as the model's does",
            f"<a model whose last Dense layer reads {its.shape[-1]}>",
        )
    return inputs, its


def _sample(x0, i, config, eta, sizes):
    """`x0` and its sampled inner points, then its boundary points: float32 `(n_inner + n_boundary, ...)`."""
    rng = np.random.default_rng(None if config.seed is None else [config.seed, i])
    args = (config.norm, config.clip_values, rng)
    inner = readout.sample_inner(x0, sizes["n_inner"] - 1, eta * config.eps, *args)
    boundary = readout.sample_boundary(x0, sizes["n_boundary"], config.eps, *args)
    return np.concatenate([x0[None].astype(np.float32), inner, boundary])


def _forward(model, x, batch_size):
    """`model`'s outputs on `x` as numpy, `batch_size` rows per `predict_on_batch` (one compiled call
    each, without `predict`'s data pipeline: a self-test makes two such calls per point)."""
    step = batch_size or len(x)
    return np.concatenate(
        [np.asarray(model.predict_on_batch(x[k : k + step])) for k in range(0, len(x), step)]
    )


def _difference(logits):
    """d = z_1 - z_0 of two-unit logits, as float64 numpy `(m,)`."""
    z = np.asarray(keras.ops.convert_to_numpy(logits), np.float64)
    return z[:, 1] - z[:, 0]


def _test_point(i, sampled, correct, models, options, n_inner):
    """The record of point `i` (`correct`: the model classified it right): the readout fitted on
    `sampled`'s features and, when it separates, the evaluation of the binarized model on the clean
    point (row 0).

    `models`: `(extractor, head, binarized, surrogate)`, the last the surrogate's `(input, features)` or
    None. Its binarized model is built anew for each point: a compiled attack step may hold a
    surrogate's weights as constants (JAX traces them), so a surrogate whose readout changed is another
    model."""
    extractor, head, binarized, surrogate = models
    record = {
        "index": i,
        "correct": correct,
        "separated": False,
        "success": None,
        "broken_by": None,
        "logit_difference": None,
        "boundary_logit_difference": None,
        "improvement": None,
    }
    phi = _forward(extractor, sampled, options["batch_size"])
    is_boundary = np.arange(len(sampled)) >= n_inner
    weights = readout.fit_readout(phi, is_boundary)
    if weights is None:
        return record
    head.set_weights(list(weights))
    d = _difference(head(keras.ops.convert_to_tensor(phi)))  # the Keras head's own float32 arithmetic
    if not (np.all(d[is_boundary] > 0) and np.all(d[~is_boundary] < 0)):
        return record
    if surrogate is not None:
        options = {**options, "surrogate": keras.Model(surrogate[0], head(surrogate[1]))}
    result = evaluate(binarized, sampled[:1], np.zeros(1, np.int64), **options)
    d_adv = float(_difference(_forward(binarized, result.x_adv, 1))[0])
    d_b = float(d[is_boundary].max())
    record.update(
        separated=True,
        success=not bool(result.robust[0]),
        broken_by=result.broken_by[0],
        logit_difference=d_adv,
        boundary_logit_difference=d_b,
        improvement=(d_adv - d_b) / (d_b + 1e-12),
    )
    return record
