"""`gradkit.evaluate`: the cascade of attacks, each on the points still robust, and its worst case."""

import time

import keras
import numpy as np

from gradkit import _checks
from gradkit.evaluation import _plan, _scale, _sources, _state, _versions
from gradkit.evaluation._cascade import (
    _PROBE,
    _randomness,
    cascade,
    certified_of,
    clean,
    flat_inputs,
    shares_of,
    weights,
)
from gradkit.evaluation._result import from_state
from gradkit.evaluation._stats import points_digest
from gradkit.gradients import check_surrogate, preprocessed, row_shape


def evaluate(
    model,
    x,
    y,
    *,
    eps,
    norm=np.inf,
    version=None,
    attacks=None,
    eot_iter=20,
    surrogate=None,
    clip_values=None,
    batch_size=None,
    seed=0,
    n_queries=5000,
    steps=100,
    state_path=None,
    verbose=1,
    certify=None,
    check_convergence=False,
    preprocessing=None,
    mask=None,
    attack_inputs=None,
):
    """Robust accuracy under a cascade of attacks: one of AutoAttack's versions, or your own list.

    Each attack runs only on the points every earlier attack left correctly classified; a point counts as
    robust when no attack fooled the model's real decision rule (argmax, or the weighted hard vote of an
    ensemble or boosted model), so the result is the per-sample worst case over all attacks. On an
    ensemble or boosted model each gradient attack runs once with the objective "loss_sum" and once
    with "vote_margin" ("apgd-ce/loss_sum", "apgd-ce/vote_margin", ...).

    AutoAttack's versions (`version=`; its `set_version`), per norm:

    | version  | attacks, in order (settings)                                                        |
    |----------|-------------------------------------------------------------------------------------|
    | standard | APGD-CE (1 restart; L1: 5), APGD-T (9 target classes; L1: 5; under L1 both with    |
    |          | `use_largereps`), FAB-T (9 target classes), Square (`n_queries`; L1: its L1 version)|
    | plus     | APGD-CE, APGD-DLR (5 restarts each), FAB (untargeted, 5 restarts), Square, APGD-T  |
    |          | (9 target classes), FAB-T (9 target classes)                                        |
    | rand     | APGD-CE, APGD-DLR (1 restart), gradients averaged over `eot_iter` draws (EOT)       |
    | malt     | APGD-CE, APGD-T towards MALT's 9 targets (Melamed et al. 2024; L1: 5, as standard), |
    |          | Square (a fifth of `n_queries`, the masking check): no FAB-T                        |
    | custom   | `attacks`                                                                           |

    Every APGD runs `steps` iterations, FAB and FAB-T too. A model of fewer classes than an attack needs
    (APGD-DLR 3, APGD-T 4, FAB-T 3) skips it in a version (named in the result's `skipped`, with the
    reason).

    Args:
        model: a Keras classifier, a `gradkit.WeightedEnsemble` or a fitted boosting estimator.
        x: float array `(n, ...)`, one input array; or data that does not fit in memory, evaluated
            block by block of `batch_size` points with the result of the concatenated arrays: a
            memory-mapped `.npy` (`np.load(path, mmap_mode="r")`, with `y`), or with `y=None` a source
            of `(x, y)` batches of any size (a generator or iterable, a `keras.utils.PyDataset`, a
            `tf.data.Dataset`, a torch `DataLoader`). Then `batch_size` is required, `x_adv` is None
            (the breaking examples are not held), `points` is None for a generator (read once), and
            `state_path` saves the state after each block (a rerun reads the stream again and resumes
            at its first unfinished block).
        y: int class ids `(n,)` (or one-hot `(n, C)`) in [0, C); None when `x` yields the labels.
        eps: float >= 0, the perturbation budget in `norm`; Linf also a per-feature budget, an array
            >= 0 broadcastable to one input's shape (FAB skipped; the result's `eps` is its max).
        norm: `np.inf` (or "inf", "linf"), 2 (or "l2") or 1 (or "l1"). Defaults to `np.inf`.
        version: "standard", "plus", "rand", "malt" or "custom" (the table above), or None (default):
            "standard", or "custom" when `attacks` is given.
        attacks: None (default: the version's list), one attack name, or a list of names of
            `gradkit.attacks.NAMES`
            ("apgd-ce", "apgd-dlr", "apgd-t", "fab", "fab-t", "square", "pgd", "bim", "fgsm"), each optionally
            "name/objective" with an ensemble objective ("loss_sum", "logit_mean", "prob_mean",
            "vote_margin"), and callables `fn(model, x, y, eps=eps) -> x_adv` (judged here with
            `gradkit.attacks.decide`); alone or with version="custom". The string "standard" is
            version="standard".
        eot_iter: int >= 1, the forward passes averaged per gradient in the "rand" version (EOT:
            Athalye et al. 2018, each pass a new draw of the model's random layers). Defaults to 20
            (AutoAttack's).
        surrogate: None (default), or a Keras model or a callable on tensors giving the model's output
            shape: the gradient attacks (APGD, PGD, BIM, FGSM) differentiate it instead of the model
            (BPDA, Athalye, Carlini & Wagner 2018): the loss, each step's success and the verdict are
            the real model's (straight-through logits: the model's values, the surrogate's gradient).
            For a model with a non-differentiable step (rounding, quantization), the model with that
            step replaced by the identity.
        clip_values: `(min, max)` input range, or None (default) for none; or per feature `(lo, hi)`
            arrays broadcastable to one input's shape (the result reports their envelope `(min lo,
            max hi)`; a callable attack is checked against that envelope).
        batch_size: rows per compiled call and per progress step, or None (default: all at once).
            A block that runs out of device memory (`gradkit.OutOfMemoryError`) is retried with half
            the rows per call (its points and seed unchanged: the same per-point result, but for
            Square, whose device draws are seeded per compiled call), down to one row.
        seed: int >= 0 or None; the random starts and searches. Defaults to 0. The points are cut into
            blocks of `batch_size` consecutive rows and an attack call on block j's remaining points
            uses `seed + j`, so a shard of whole blocks (`gradkit evaluate --shard`) gets the same
            per-point results as the whole run.
        n_queries: int >= 1, Square's query budget. Defaults to 5000.
        steps: int >= 1, iterations of APGD, FAB-T, PGD and BIM. Defaults to 100. ("fab-t" is
            AutoAttack's FAB-T: the top 9 target classes, 1 restart, on the points still robust.)
        state_path: None (default) or a JSON file path: after each block of `batch_size` rows of each
            attack the state is saved there atomically (arrays in `<stem>.<k>.npz` and, per block of
            the running attack, `<stem>.<k>.<j>.npz` next to it); a rerun with the same arguments and
            the same model (its weights' SHA-256 is part of the state) continues at the next
            unfinished block, with the result of an uninterrupted run (each block has its own seed).
            A file of another evaluation raises `gradkit.errors.StateMismatchError` naming what
            changed. (`gradkit evaluate` keeps its state in `--out` by default.)
        verbose: 0 silent; >= 1 (default) a tqdm progress bar per attack.
        certify: None (default), "ibp" or "crown": also certify every point at eps (Linf or L2) with
            `gradkit.certify` (an ensemble or boosted model: its weighted vote, from each member's
            certificate of its own prediction, `gradkit.vote_certificate`), giving the result's
            `certified`, `certified_accuracy` (a lower bound beside `robust_accuracy`, the upper
            bound) and the flag `certificate_contradicted` for a certified point an attack broke.
        check_convergence: bool, default False. True: after the cascade every registry attack of it
            runs again on the points still robust with twice `steps` (Square: twice `n_queries`) and
            twice its restarts where it has them (APGD, FAB), named "<attack> (x2)" in `per_attack`
            and `broken_by`. A point a rerun breaks counts as broken (the worst case per sample: the
            robust accuracy falls by them) and the flag `not_converged` gives their count and indices.
            The ascents (APGD, PGD, BIM) also record their best loss after every step: where its mean
            over the points an attack left robust still rose by more than 1e-3 (relative) over the
            last 10% of its steps, the flag `still_improving` names the attack (and `per_attack`
            holds its "loss_tail": `[start, end, count]`, the summed best losses there and the rows).
            Callables and FGSM are not rerun.
        preprocessing: None (default), `(mean, std)` (floats or arrays broadcastable to one input's
            shape; a `(C,)` vector is the channels-last axis) or a callable / Keras layer on tensors
            (a keras-hub preprocessor): the model sees `(x - mean) / std` (or `preprocessing(x)`) while
            `x`, eps, `clip_values` and `x_adv` are in the units of `x` (pixels), as the attacks'
            `preprocessing=`; `certify` folds an affine one into its input set (a callable is refused).
            On a stream a callable takes rows of the model's input shape.
        mask: None (default) or a 0/1 array broadcastable to one input's shape: 1 where a feature may
            change; every attack keeps the others bit-identical (`certify`: Linf only). Several inputs:
            a dict `{name: mask}`.
        attack_inputs: None (default: every input) or the names of the inputs of a model of several
            inputs that the attacks may change; the others are held fixed. `x` is then a list (in
            `model.inputs` order) or a dict of arrays, `clip_values` one pair or a dict `{name: (lo,
            hi)}`; the inputs are attacked as one flat row (`gradkit.attacks.FlatInputs`: Linf is each
            input's own eps-ball, L2 and L1 one ball over the attacked inputs together), and `x_adv` comes
            back in `x`'s structure.

    Returns:
        `Evaluation`: accuracies, the per-sample `robust`, `broken_by` and `x_adv`, the per-attack
        records, costs and attack-failure `flags`.

    Raises:
        ValueError: an unknown `version`, `attacks` with a version other than "custom", eot_iter < 1,
            a `surrogate` whose output shape differs from the model's, an unknown attack name or
            objective, eps < 0, n_queries < 1, steps < 1, labels out
            of range, `x` outside `clip_values`, an attack the model has too few classes for, or a
            `state_path` that holds another evaluation (other arguments, another model or weights:
            `gradkit.errors.StateMismatchError`), a bad `preprocessing`. All are raised before any
            attack runs and before anything is written.
        TypeError: arguments of the wrong type.

    References:
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (AutoAttack's versions:
        https://github.com/fra31/auto-attack)
        Athalye, Engstrom, Ilyas & Kwok (2018), "Synthesizing robust adversarial examples", ICML,
        https://arxiv.org/abs/1707.07397 (EOT)
        Athalye, Carlini & Wagner (2018), "Obfuscated gradients give a false sense of security", ICML,
        https://arxiv.org/abs/1802.00420 (BPDA, sec. 4.1; EOT against randomized defences, sec. 4.3)
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (the L1 standard version: sec. 4)
        Melamed, Yehudai & Shamir (2024), "MALT Powers Up Adversarial Attacks", NeurIPS,
        https://arxiv.org/abs/2407.02240 (the "malt" version's targets)
    """
    if _sources.is_stream(x):  # data that does not fit in memory: block by block (`_streaming`)
        from gradkit.evaluation._streaming import Suite, evaluate_stream

        suite = Suite(cascade, certified_of, shares_of, weights, _randomness, _PROBE)
        options = dict(version=version, attacks=attacks, eot_iter=eot_iter, surrogate=surrogate, eps=eps)
        options.update(norm=norm, clip_values=clip_values, batch_size=batch_size, seed=seed)
        options.update(n_queries=n_queries, steps=steps, verbose=verbose, certify=certify)
        options.update(check_convergence=check_convergence, mask=mask)
        if attack_inputs is not None:  # one input per stream: several inputs are attacked from arrays
            _checks.fail(
                "attack_inputs", "None with a stream `x` (several inputs need arrays)", attack_inputs
            )
        model = preprocessed(model, preprocessing)  # a stream's rows: the model's input shape
        return evaluate_stream(model, x, y, suite=suite, state_path=state_path, **options)
    _versions.check_version(version, attacks, eot_iter)  # before any work: no forward pass yet
    model = preprocessed(model, preprocessing, row_shape(x))  # the model of pixels, attacked below
    flat, model, x, clip_values, mask = flat_inputs(model, x, attack_inputs, clip_values, mask)
    x, labels, classes = _plan.check_data(model, x, y)
    surrogate = check_surrogate(surrogate, model, x)
    config = _plan.check_config(
        model,
        classes,
        version=version,
        eot_iter=eot_iter,
        surrogate=surrogate,
        attacks=attacks,
        eps=eps,
        norm=norm,
        clip_values=clip_values,
        batch_size=batch_size,
        seed=seed,
        n_queries=n_queries,
        steps=steps,
        verbose=verbose,
        certify=certify,
        inputs=_scale.inputs(model, x, classes),
        check_convergence=check_convergence,
        mask=mask,
    )
    _plan.check_range(x, config.box or config.clip_values, config.mask)
    state_path = _state.check_path(state_path)
    fp = _state.fingerprint(model, x, labels, config) if state_path else None
    state = _state.load(state_path, fp) if state_path else None
    start = time.perf_counter()
    if state is None:
        state = clean(model, x, labels, config)
    cascade(model, x, labels, config, state, state_path=state_path, fp=fp, start=start)
    shares = shares_of(model, x, labels, config)
    state.certified = certified = certified_of(model, x, labels, config)
    result = from_state(
        state,
        config,
        weights=weights(model),
        shares=shares,
        backend=keras.backend.backend(),
        certified=certified,
    )
    result.points = points_digest(x, labels)
    if flat is not None:
        result.x_adv = flat.unflatten(result.x_adv)
    return result
