"""Randomized smoothing: a classifier certified in the L2 norm by Gaussian noise (Cohen et al. 2019).

The smoothed classifier of a base classifier f is g(x) = argmax_c P(f(x + d) = c), d ~ N(0, sigma^2 I).
If the top class c_A has probability p_A >= pA_lower > 1/2, then g(x + e) = c_A for every ||e||_2 < R =
sigma * Phi^-1(pA_lower) (their Theorem 1 with p_B <= 1 - p_A). Both procedures of their Algorithm 1
count the base decisions of noisy copies of each point:

- PREDICT(x, n, alpha): the two most frequent classes c_A, c_B of n samples; c_A unless the two-sided
  binomial test of n_A successes in n_A + n_B trials at p = 1/2 has a p-value above alpha (abstain, -1).
  Wrong with probability at most alpha (their Theorem 2).
- CERTIFY(x, n0, n, alpha): c_A guessed from n0 samples, then p_A bounded from n fresh samples by the
  one-sided Clopper-Pearson lower bound at level 1 - alpha (`pA_lower`: the alpha quantile of
  Beta(n_A, n - n_A + 1)); the radius sigma * Phi^-1(pA_lower) when pA_lower > 1/2, else abstain (-1,
  radius 0). A certified class is wrong (or its radius too large) with probability at most alpha.

The base decision is the model's real one: the argmax of its logits (one unit: class 1 where the logit
is > 0), and for a `WeightedEnsemble` or a boosted model (`AdaBoostM1`, `SAMME`) the weighted hard vote
of its members (ties to the lower class id), computed on the device by `AttackGradient.bind_decision`.
Noise is drawn with `keras.random.normal` from a `keras.random.SeedGenerator` on the device, and the
counts are summed there, batch by batch; only the final counts come back to the host.

`clip_values` are not applied to the noisy samples: Cohen et al.'s smoothed classifier is defined
on x + d for Gaussian d, wherever that lands. Clipping would change the classifier being certified.

References:
    Cohen, Rosenfeld & Kolter (2019), "Certified adversarial robustness via randomized smoothing", ICML,
    https://arxiv.org/abs/1902.02918 (Algorithm 1, Theorems 1 and 2; code: github.com/locuslab/smoothing)
    Clopper & Pearson (1934), "The use of confidence or fiducial limits illustrated in the case of the
    binomial", Biometrika 26(4), https://doi.org/10.1093/biomet/26.4.404
"""

import keras
import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from gradkit import _checks, backend
from gradkit.gradients import (
    AttackGradient,
    WeightedEnsemble,
    as_ensemble,
    cached,
    check_classifier,
    check_x,
    output_index,
    output_shape,
)

ABSTAIN = -1


def smooth(model, sigma, *, batch_size=1000, seed=None, verbose=1, output=None):
    """The randomized-smoothing classifier of `model` under Gaussian noise of standard deviation `sigma`.

    Args:
        model: the base classifier: a Keras classifier (its argmax), a `gradkit.WeightedEnsemble` or a
            fitted `gradkit.AdaBoostM1` / `gradkit.SAMME` with Keras learners (their weighted hard vote).
        sigma: float > 0, the noise's standard deviation (per input value, in the model's input units).
        batch_size: int >= 1, noisy rows per compiled forward call. Defaults to 1000.
        seed: None (default: fresh noise at every call) or an int >= 0: every `predict` and `certify`
            call then draws the same noise, so it returns the same result.
        verbose: 0 silent; 1 (default) a tqdm progress bar of the samples drawn.
        output: name or index of the classifier output for multi-output models; None for one output.

    Returns:
        A `SmoothedClassifier`.

    Raises:
        TypeError: `model` is none of the above; a non-numeric `sigma` or a non-integer `batch_size`,
            `seed` or `verbose`.
        ValueError: `sigma` <= 0, `batch_size` < 1, `seed` < 0 or `verbose` < 0. (A model output that is
            not a classifier's is refused by `predict` and `certify`, before any sample is drawn.)

    References:
        Cohen, Rosenfeld & Kolter (2019), "Certified adversarial robustness via randomized smoothing",
        ICML, https://arxiv.org/abs/1902.02918
    """
    return SmoothedClassifier(model, sigma, batch_size=batch_size, seed=seed, verbose=verbose, output=output)


class SmoothedClassifier:
    """A base classifier smoothed by Gaussian noise; see `smooth` for the arguments."""

    def __init__(self, model, sigma, *, batch_size=1000, seed=None, verbose=1, output=None):
        self.ensemble = as_ensemble(model)
        self.model = model
        self.sigma = _checks.check_real(sigma, "sigma", minimum=0, strict=True)
        self.batch_size = _checks.check_int(batch_size, "batch_size", minimum=1)
        self.seed = _checks.check_seed(seed)
        self.verbose = _checks.check_int(verbose, "verbose", minimum=0)
        self.output = output
        owner = model if isinstance(model, (keras.Model, WeightedEnsemble)) else self.ensemble
        options = dict(
            loss="ce",
            combination="loss_sum",
            targeted=False,
            output=output,
            batch_size=self.batch_size,
            temperature=1.0,
            eot_iter=1,
        )  # the key of the attacks' cached objective: an attack on the same model shares its compile

        def factory():
            return AttackGradient(owner, **options)

        self._objective = cached(owner, "attack", factory, surrogate=None, **options)

    def __repr__(self):
        return f"SmoothedClassifier(sigma={self.sigma}, members={len(self.ensemble)})"

    def predict(self, x, n=100_000, alpha=0.001):
        """Cohen et al.'s PREDICT: the smoothed class of each point, or -1 where it abstains.

        Args:
            x: inputs `(m, ...)`, one array shaped like the model's input.
            n: int >= 1, noisy samples per point. Defaults to 100,000 (as their code).
            alpha: 0 < alpha < 1, the probability of returning a wrong class. Defaults to 0.001.

        Returns:
            int64 `(m,)`: class ids (column indices of the output; for a boosted model, indices into
            `classes_`), -1 where the two-sided binomial test of the top two counts has p > `alpha`.

        Raises:
            ValueError: `n` < 1, `alpha` outside (0, 1), `x` not shaped like the model's input, or a
                model output that is not a classifier's (all before any sample is drawn).
            TypeError: a non-integer `n`, a non-numeric `alpha` or `x` that is not one numeric array.
        """
        n = _checks.check_int(n, "n", minimum=1)
        alpha = check_alpha(alpha)
        x = self._check_x(x)
        return predict_from_counts(self.counts(x, n, desc="smoothed predict"), alpha)

    def certify(self, x, n0=100, n=100_000, alpha=0.001):
        """Cohen et al.'s CERTIFY: the smoothed class of each point and its certified L2 radius.

        Args:
            x: inputs `(m, ...)`, one array shaped like the model's input.
            n0: int >= 1, samples that choose the top class. Defaults to 100.
            n: int >= 1, fresh samples that bound its probability. Defaults to 100,000.
            alpha: 0 < alpha < 1, the probability that a certificate is wrong. Defaults to 0.001.

        Returns:
            `(classes, radii)`: int64 `(m,)` class ids (-1: abstain) and float64 `(m,)` radii `sigma *
            Phi^-1(pA_lower)` (0 where it abstains): the smoothed classifier returns the class for every
            x + e with ||e||_2 < radius. With all n samples on the top class pA_lower = alpha^(1/n), so
            no radius exceeds `sigma * Phi^-1(alpha^(1/n))` (3.8115 sigma at n = 100,000, alpha = 0.001).

        Raises:
            ValueError: `n0` or `n` < 1, `alpha` outside (0, 1), `x` not shaped like the model's input,
                or a model output that is not a classifier's (all before any sample is drawn).
            TypeError: non-integer `n0` or `n`, a non-numeric `alpha` or `x` that is not one array.
        """
        n0 = _checks.check_int(n0, "n0", minimum=1)
        n = _checks.check_int(n, "n", minimum=1)
        alpha = check_alpha(alpha)
        x = self._check_x(x)
        generator = self._generator()
        selection = self.counts(x, n0, desc="certify: selection", generator=generator)
        estimation = self.counts(x, n, desc="certify: estimation", generator=generator)
        return certify_from_counts(selection, estimation, alpha, self.sigma)

    def counts(self, x, n, *, desc="smoothing", generator=None):
        """How often the base classifier decides each class on `n` noisy copies of each point.

        Args:
            x: checked inputs `(m, ...)` (numpy, the model's dtype).
            n: noisy samples per point.
            desc: the progress bar's label.
            generator: the `keras.random.SeedGenerator` to draw from; None: a new one from `seed`.

        Returns:
            int64 `(m, C)` counts, each row summing to `n`.
        """
        generator = generator or self._generator()
        decision, rows = self._objective.bind_decision()
        m, n_classes = len(x), self._n_classes(x)
        x_dev = backend.to_tensor(x)
        classes = keras.ops.arange(n_classes, dtype="int32")
        total, step = m * n, min(self.batch_size, rows)
        span = min(-(-step // n) + 1, m)  # the most points one batch touches: one shape for every batch
        counts = keras.ops.zeros((m + span, n_classes), "int32")  # `span` spare rows: every slice fits
        offsets = keras.ops.arange(rows, dtype="int32")  # the batch's rows; indices made on the device
        with tqdm(total=total, desc=desc, unit="sample", unit_scale=True, disable=not self.verbose) as bar:
            for start in range(0, total, step):
                stop = min(start + step, total)
                first = start // n
                # each row's point, counted from `first` (padding rows: the last point of the batch)
                segment = keras.ops.minimum((offsets + start % n) // n, (stop - 1) // n - first)
                xb = keras.ops.take(x_dev, segment + first, axis=0)
                shape = keras.ops.shape(xb)
                noise = keras.random.normal(shape, stddev=self.sigma, dtype=xb.dtype, seed=generator)
                ids = decision(backend.distribute_batch((xb + noise,))[0])
                valid = keras.ops.expand_dims(keras.ops.cast(offsets < stop - start, "int32"), -1)
                votes = keras.ops.cast(keras.ops.expand_dims(ids, -1) == classes, "int32") * valid
                local = keras.ops.segment_sum(votes, segment, num_segments=span)
                block = keras.ops.slice(counts, (first, 0), (span, n_classes))
                counts = keras.ops.slice_update(counts, (first, 0), block + local)
                bar.update(stop - start)
        return backend.to_numpy(counts)[:m].astype(np.int64)

    def _generator(self):
        return keras.random.SeedGenerator(self.seed)

    def _check_x(self, x):
        if isinstance(x, (list, tuple, dict)):
            _checks.fail("x", "one numeric array shaped like the model's input", type(x).__name__, TypeError)
        x, _ = check_x(self.ensemble.models[0], x)
        return x

    def _n_classes(self, x):
        """C, the number of classes of the base classifier (2 for one sigmoid or logit unit)."""
        index = output_index(self.ensemble.models[0], self.output)
        shapes = [output_shape(m, index, x[:1]) for m in self.ensemble.models]
        for member, shape in zip(self.ensemble.models, shapes):
            check_classifier(member, index, shape)
        if shapes[0] is not None and shapes[0][-1] is not None:
            return max(int(shapes[0][-1]), 2)
        return int(self._objective.forward(x[:1], np.zeros(1, np.int32))[1].shape[-1])  # traced: one row


def check_alpha(alpha):
    """`alpha` as a float with 0 < alpha < 1."""
    expected = "a number with 0 < alpha < 1"
    if not _checks.is_real(alpha):
        _checks.fail("alpha", expected, alpha, TypeError)
    if not 0.0 < float(alpha) < 1.0:
        _checks.fail("alpha", expected, alpha)
    return float(alpha)


def predict_from_counts(counts, alpha):
    """PREDICT from counts `(m, C)`: the top class (ties to the lower id), or -1 where the two-sided
    binomial test of n_A successes in n_A + n_B trials at p = 1/2 has a p-value > `alpha` (Cohen et al.'s
    code: `binom_test(nA, nA + nB, 0.5) > alpha` abstains). Returns int64 `(m,)`."""
    counts = np.asarray(counts, dtype=np.int64)
    order = np.argsort(-counts, axis=1, kind="stable")
    top = order[:, 0]
    n_a = np.take_along_axis(counts, order[:, :1], axis=1)[:, 0]
    n_b = np.take_along_axis(counts, order[:, 1:2], axis=1)[:, 0]
    p = np.array([stats.binomtest(int(a), int(a + b), 0.5).pvalue for a, b in zip(n_a, n_b)])
    return np.where(p > alpha, ABSTAIN, top).astype(np.int64)


def lower_confidence_bound(n_a, n, alpha):
    """The one-sided Clopper-Pearson lower bound at level 1 - `alpha` on p from `n_a` successes in `n`
    trials: the alpha quantile of Beta(n_a, n - n_a + 1), 0 for n_a = 0 (alpha^(1/n) for n_a = n)."""
    n_a = np.asarray(n_a, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bound = stats.beta.ppf(alpha, n_a, n - n_a + 1)
    return np.where(n_a > 0, bound, 0.0)


def certify_from_counts(selection, estimation, alpha, sigma):
    """CERTIFY from the selection counts `(m, C)` (n0 samples) and fresh estimation counts `(m, C)` (n
    samples): `(classes int64 (m,), radii float64 (m,))`, -1 and 0 where pA_lower <= 1/2."""
    selection, estimation = np.asarray(selection), np.asarray(estimation)
    top = np.argmax(selection, axis=1)
    n = estimation.sum(axis=1)
    p_lower = lower_confidence_bound(estimation[np.arange(len(top)), top], n, alpha)
    certified = p_lower > 0.5
    radii = np.where(certified, sigma * stats.norm.ppf(np.where(certified, p_lower, 0.75)), 0.0)
    return np.where(certified, top, ABSTAIN).astype(np.int64), radii.astype(np.float64)
