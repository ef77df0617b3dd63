"""Boosting of Keras networks: AdaBoost.M1 and SAMME, adversarial rounds, checkpoints and resume.

Each round trains a fresh learner from `build_fn()` with the boosting weights passed to
`fit(sample_weight=...)`: the weights scale each sample's cost (Schwenk & Bengio 2000 call this
"weighting the cost function"), no resampling. The weights handed to the learner are rescaled to mean
1 over the training set; with weights summing to 1 each sample's loss would be divided by n and the
effective learning rate of the network would collapse. The boosting quantities themselves use the
normalized weights w (sum 1):

    e_t = sum_i w_i [h_t(x_i) != y_i] / sum_i w_i
    AdaBoost.M1: alpha_t = ln((1 - e_t) / e_t),                          stops at e_t >= 1/2
    SAMME:       alpha_t = learning_rate * (ln((1 - e_t) / e_t) + ln(K - 1)), stops at e_t >= 1 - 1/K
    w_i <- w_i * exp(alpha_t [h_t(x_i) != y_i]), then renormalized to sum 1.

A first learner at or above the threshold raises "worse than random"; a later one is discarded and
boosting stops with the earlier rounds. A perfect round (e_t = 0) is kept with alpha_t = 1.0 and ends
boosting, as in scikit-learn (never inf or NaN). Weights are clipped below at machine epsilon before
each round (zero initial weights stay zero), as scikit-learn does, so the non-Keras path reproduces
`sklearn.ensemble.AdaBoostClassifier` exactly.

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1); Freund & Schapire (1997), "A
    decision-theoretic generalization of on-line learning and an application to boosting", JCSS 55(1),
    https://doi.org/10.1006/jcss.1997.1504.
    Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),
    https://doi.org/10.4310/SII.2009.v2.n3.a8 (SAMME; probabilities from eq. 15).
    Schwenk & Bengio (2000), "Boosting neural networks", Neural Computation 12(8),
    https://doi.org/10.1162/089976600300015178 (sample weights as cost weights).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (training on clean plus adversarial examples).
    Abernethy, Awasthi & Kale (2021), "A multiclass boosting framework for achieving fast and provable
    adversarial robustness", https://arxiv.org/abs/2103.01276, and Zhang et al. (2022), "Building
    robust ensembles via margin boosting", ICML, https://arxiv.org/abs/2206.03362 (boosting for
    robustness; gradkit's adversarial option is the simpler scheme described in `SAMME`, not theirs).
"""

import hashlib
import inspect
import math
import time
import warnings

import keras
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.extmath import softmax
from sklearn.utils.validation import check_is_fitted
from tqdm import tqdm

from gradkit import losses as losses_lib
from gradkit import persistence, validation
from gradkit.ensemble import WeightedEnsemble
from gradkit.ensemble import predict as ensemble_predict

_ATTACKS = ("fgsm", "pgd")
_PREDICT_BATCH = 256
_STATE = (
    "estimators_ estimator_weights_ estimator_errors_ classes_ n_classes_ _sample_weight _finished "
    "_fingerprint _checkpoint_files"
).split()


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value):
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and (math.isfinite(value))
    )


def _is_keras(learner):
    return isinstance(learner, keras.Model)


def _check_learner(learner, x, n_classes, adversarial, checkpoint_dir):
    """Raises before any training if a fresh learner cannot be boosted."""
    if _is_keras(learner):
        if not getattr(learner, "compiled", False):
            raise ValueError(
                "`build_fn` must return a compiled keras.Model: call `model.compile(...)` in it."
            )
        losses_lib.resolve_loss(None, learner)  # ValueError if compiled without a loss
        if len(getattr(learner, "outputs", None) or [None]) != 1:
            raise ValueError("`build_fn` must return a model with a single output.")
        units = _units(learner, x)
        if units != n_classes and not (units == 1 and n_classes == 2):
            raise ValueError(
                f"The model from `build_fn` has {units} output units but y has {n_classes} classes: use "
                f"{n_classes} units (or 1 sigmoid unit for 2 classes)."
            )
        return
    if not (callable(getattr(learner, "fit", None)) and callable(getattr(learner, "predict", None))):
        raise TypeError(
            "`build_fn` must return a compiled keras.Model or an object with fit(x, y, sample_weight=...) "
            f"and predict(x). Received: {type(learner).__name__}"
        )
    if "sample_weight" not in inspect.signature(learner.fit).parameters:
        raise TypeError(
            f"The learner {type(learner).__name__} from `build_fn` has no `sample_weight` argument in fit(); "
            "boosting needs learners that take sample weights (it would silently run unweighted)."
        )
    if adversarial is not None:
        raise TypeError("`adversarial` needs Keras learners (attacks use input gradients).")
    if checkpoint_dir is not None:
        raise TypeError("`checkpoint_dir` needs Keras learners (members are saved as .keras files).")


def _predict_ids(learner, x):
    """Class ids (n,) int64 predicted by one learner (1 sigmoid unit: 0/1 at p = 0.5 or logit 0)."""
    if not _is_keras(learner):
        return np.asarray(learner.predict(x)).reshape(-1).astype(np.int64)
    out = np.asarray(ensemble_predict(learner, x, _PREDICT_BATCH))
    out = out.reshape(out.shape[0], -1)
    if out.shape[1] == 1:
        threshold = 0.0 if losses_lib.resolve_loss(None, learner).from_logits else 0.5
        return (out[:, 0] > threshold).astype(np.int64)
    return out.argmax(axis=1).astype(np.int64)


def _units(learner, x):
    """Size of the learner's output (its last axis; 1 for a flat output)."""
    outputs = getattr(learner, "outputs", None)
    shape = tuple(outputs[0].shape) if outputs else np.shape(learner.predict(x[:1], verbose=0))
    return int(shape[-1]) if len(shape) > 1 else 1


def _keras_targets(learner, ids, n_classes, x):
    """Labels in the form the learner's compiled loss takes: a 0/1 column, ids or one-hot rows."""
    if _units(learner, x) == 1:
        return ids.astype(np.float32)[:, None]
    if losses_lib.resolve_loss(None, learner).kind == "sparse":
        return ids
    return np.eye(n_classes, dtype=np.float32)[ids]


def _fingerprint(x, ids, weights, classes):
    digest = hashlib.sha256()
    for a in (np.ascontiguousarray(x), ids, weights, np.asarray(classes).astype(str)):
        digest.update(f"{a.dtype}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


class BaseBoosting(ClassifierMixin, BaseEstimator):
    """Shared boosting loop; `AdaBoostM1` and `SAMME` only differ in `_alpha` and `_max_error`."""

    def _alpha(self, error, n_classes):
        raise NotImplementedError

    def _max_error(self, n_classes):
        raise NotImplementedError

    def _check_params(self):
        n, lr, fn = self.n_estimators, getattr(self, "learning_rate", 1.0), self.build_fn
        kwargs, rs, adv = self.fit_kwargs, self.random_state, self.adversarial
        attack_ok = adv is None or (isinstance(adv, dict) and adv.get("attack") in _ATTACKS)
        eps = adv.get("eps") if attack_ok and adv is not None else 0.0
        checks = [
            (_is_int(n) and n >= 1, "n_estimators", n, "an integer >= 1"),
            (_is_real(lr) and lr > 0, "learning_rate", lr, "a finite number > 0"),
            (
                callable(fn) and not _is_keras(fn),
                "build_fn",
                fn,
                "a function that returns a new learner each round (e.g. a compiled keras.Model), not a model",
                TypeError,
            ),
            (kwargs is None or isinstance(kwargs, dict), "fit_kwargs", kwargs, "a dict or None", TypeError),
            (
                not {"x", "y", "sample_weight"} & set(kwargs or {}),
                "fit_kwargs",
                kwargs,
                "free of x, y, sample_weight",
            ),
            (rs is None or (_is_int(rs) and rs >= 0), "random_state", rs, "None or an integer >= 0"),
            (_is_int(self.verbose) and self.verbose >= 0, "verbose", self.verbose, "an integer >= 0"),
            (attack_ok, "adversarial", adv, f'None or a dict with "attack" in {_ATTACKS} and "eps"'),
            (_is_real(eps) and eps >= 0, 'adversarial["eps"]', eps, "a finite number >= 0"),
        ]
        for ok, name, value, expected, *error in checks:
            if not ok:
                raise (error or [ValueError])[0](f"`{name}` must be {expected}. Received: {name}={value!r}")

    @staticmethod
    def _check_data(x, y, sample_weight):
        x = np.asarray(x)
        if x.ndim < 2 or x.shape[0] == 0 or not np.issubdtype(x.dtype, np.number):
            raise ValueError(
                f"`x` must be a non-empty numeric array of shape (n, ...). Received: shape {x.shape}"
            )
        if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
            raise ValueError("`x` contains NaN or inf.")
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.shape != (x.shape[0],):
            raise ValueError(
                f"`y` must be class labels of shape ({x.shape[0]},). Received: y.shape={y.shape}"
            )
        classes, ids = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"`y` must hold at least two classes. Received: classes={classes.tolist()}")
        w = np.ones(x.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (x.shape[0],) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError(f"`sample_weight` must be ({x.shape[0]},) finite, >= 0, not all zero.")
        return x, ids.astype(np.int64), classes, w / w.sum()

    def fit(self, x, y, sample_weight=None, *, resume=False):
        """Boosts learners from `build_fn` on `(x, y)`.

        Args:
            x: numeric array `(n, ...)` (the learners' input).
            y: class labels `(n,)` of any sortable type; `classes_` is `np.unique(y)`.
            sample_weight: initial weights `(n,)`, finite and >= 0, not all zero. Defaults to uniform.
            resume: False (default) starts from round 0. True continues an interrupted or shorter run
                from its last finished round: from `checkpoint_dir` when it holds a checkpoint (loaded
                with Keras safe mode), else from this estimator's own fitted rounds, else from round 0
                (as Keras' BackupAndRestore does). Raising `n_estimators` and resuming adds rounds.

        Returns:
            self.

        Raises:
            ValueError: bad parameters or data, one class, a first learner worse than random, a
                checkpoint made on other data or settings, or more rounds than `n_estimators`.
            TypeError: a `build_fn` that returns neither a compiled Keras model nor an object with
                fit(x, y, sample_weight=...) and predict(x).
        """
        self._check_params()
        x, ids, classes, w0 = self._check_data(x, y, sample_weight)
        fingerprint = _fingerprint(x, ids, w0, classes)
        if not (resume and self._resume(fingerprint)):
            self.estimators_, self.estimator_weights_, self.estimator_errors_ = [], np.zeros(0), np.zeros(0)
            self.classes_, self.n_classes_ = classes, len(classes)
            self._sample_weight, self._finished, self._fingerprint = w0.copy(), False, fingerprint
            self._checkpoint_files = None
        start = len(self.estimators_)
        if start > self.n_estimators:
            raise ValueError(
                f"The fit to resume has {start} rounds, more than n_estimators={self.n_estimators}."
            )
        if self._finished or start == self.n_estimators:
            return self
        learner = self._new_learner(start)
        _check_learner(learner, x, self.n_classes_, self.adversarial, self.checkpoint_dir)
        zero = w0 == 0
        for t in range(start, self.n_estimators):
            learner = learner if t == start else self._new_learner(t)
            if not self._round(t, learner, x, ids, zero):
                break
        return self

    def _new_learner(self, t):
        if self.random_state is not None:
            keras.utils.set_random_seed(int(self.random_state) + t)
        return self.build_fn()

    def _round(self, t, learner, x, ids, zero):
        """One boosting round; returns False when boosting stops."""
        tic = time.perf_counter()
        if any(learner is m for m in self.estimators_):
            raise ValueError("`build_fn` must return a new learner on every call, not the same object.")
        w = np.clip(self._sample_weight, np.finfo(np.float64).eps, None)
        w[zero] = 0.0
        self._train(t, learner, x, ids, w)
        incorrect = _predict_ids(learner, x) != ids
        error = float(np.average(incorrect, weights=w))
        limit = self._max_error(self.n_classes_)
        if error >= limit:
            if t == 0:
                raise ValueError(
                    f"The first learner is worse than random: weighted error {error:.4f} >= {limit:.4f} "
                    f"for {type(self).__name__} with {self.n_classes_} classes. Use a stronger learner."
                )
            self._log(
                f"Round {t + 1}/{self.n_estimators} - error: {error:.4f} >= {limit:.4f}, learner "
                f"discarded, boosting stopped - {time.perf_counter() - tic:.1f}s"
            )
            self._finished = True
            self._checkpoint()
            return False
        alpha = 1.0 if error <= 0 else self._alpha(error, self.n_classes_)
        with np.errstate(divide="ignore"):
            new_w = np.exp(np.log(w) + alpha * incorrect * (w > 0))
        self.estimators_.append(learner)
        self.estimator_weights_ = np.append(self.estimator_weights_, alpha)
        self.estimator_errors_ = np.append(self.estimator_errors_, max(error, 0.0))
        self._finished = error <= 0 or not np.isfinite(new_w.sum())
        if not np.isfinite(new_w.sum()):
            warnings.warn(f"Sample weights overflowed at round {t + 1}; boosting stopped.", stacklevel=3)
        else:
            self._sample_weight = new_w / new_w.sum()
        self._log(
            f"Round {t + 1}/{self.n_estimators} - error: {error:.4f} - alpha: {alpha:.4f} - "
            f"{time.perf_counter() - tic:.1f}s" + (" - perfect, boosting stopped" if error <= 0 else "")
        )
        self._checkpoint()
        return not self._finished

    def _train(self, t, learner, x, ids, w):
        sw = w * (len(w) / w.sum())  # mean 1: the learner's loss keeps its usual scale
        kwargs = dict(self.fit_kwargs or {})
        if not _is_keras(learner):
            learner.fit(x, ids, sample_weight=sw, **kwargs)
            return
        kwargs.setdefault("verbose", 0)
        targets = _keras_targets(learner, ids, self.n_classes_, x)
        if self.adversarial is not None:
            if t == 0:  # the first round attacks its own learner, trained on clean data first
                learner.fit(x, targets, sample_weight=sw, **kwargs)
                target = learner
            else:
                target = WeightedEnsemble(self.estimators_, self.estimator_weights_)
            x_adv = self._attack(target, x, ids)
            x = np.concatenate([x, x_adv])
            targets, sw = np.concatenate([targets, targets]), np.concatenate([sw, sw])
        learner.fit(x, targets, sample_weight=sw, **kwargs)

    def _attack(self, target, x, ids):
        from gradkit import attacks  # lazy: attacks import the gradient engine

        options = dict(self.adversarial)
        fn = getattr(attacks, options.pop("attack"))
        return np.asarray(fn(target, x, ids, **options), dtype=x.dtype).reshape(x.shape)

    def _log(self, line):
        if self.verbose:
            tqdm.write(line)

    def _checkpoint(self):
        if self.checkpoint_dir is not None:
            persistence.save(self, self.checkpoint_dir)

    def _resume(self, fingerprint):
        """Takes the state to resume from (checkpoint or memory); False when there is none."""
        source = self
        if self.checkpoint_dir is not None and persistence.exists(self.checkpoint_dir):
            source = persistence.load(self.checkpoint_dir)
            if type(source) is not type(self):
                raise ValueError(
                    f"`checkpoint_dir` holds a {type(source).__name__} fit, not a {type(self).__name__}."
                )
            for key in ("learning_rate", "random_state", "adversarial", "fit_kwargs"):
                saved, current = source.get_params().get(key), self.get_params().get(key)
                if persistence.to_json(saved) != persistence.to_json(current):
                    raise ValueError(f"The checkpoint was made with {key}={saved!r}, not {key}={current!r}.")
        if getattr(source, "_fingerprint", None) is None:
            return False
        if source._fingerprint != fingerprint:
            raise ValueError("Cannot resume: x, y or sample_weight differ from the interrupted fit.")
        for key in _STATE:
            setattr(self, key, getattr(source, key))
        return True

    def _member_ids(self, x):
        check_is_fitted(self)
        if all(_is_keras(m) for m in self.estimators_):  # the input shape checked before predicting
            x, _ = validation.check_x(self.estimators_[0], x, require_float=False)
        return [_predict_ids(m, x) for m in self.estimators_]

    def _votes(self, ids, weight):
        """The SAMME coding of one learner's votes, as scikit-learn: weight or -weight / (K - 1)."""
        return np.where(
            ids[:, None] == np.arange(self.n_classes_), weight, -1 / (self.n_classes_ - 1) * weight
        )

    def staged_decision_function(self, x):
        """Yields the decision function after each round (see `decision_function`)."""
        pred, norm = None, 0.0
        for ids, weight in zip(self._member_ids(x), self.estimator_weights_):
            norm += weight
            pred = self._votes(ids, weight) if pred is None else pred + self._votes(ids, weight)
            yield self._binary(pred / norm)

    def _binary(self, pred):
        if self.n_classes_ == 2:
            pred = pred.copy()
            pred[:, 0] *= -1
            return pred.sum(axis=1)
        return pred

    def decision_function(self, x):
        """Weighted SAMME votes: float64 `(n, K)`, or `(n,)` for K = 2 (> 0 means `classes_[1]`).

        Column c is sum_t alpha_t (1 if h_t(x) = c else -1 / (K - 1)) / sum_t alpha_t, exactly as
        scikit-learn's `AdaBoostClassifier.decision_function`.
        """
        pred = sum(self._votes(ids, w) for ids, w in zip(self._member_ids(x), self.estimator_weights_))
        return self._binary(pred / self.estimator_weights_.sum())

    def _labels(self, decision):
        index = decision > 0 if self.n_classes_ == 2 else np.argmax(decision, axis=1)
        return self.classes_.take(index.astype(np.int64), axis=0)

    def predict(self, x):
        """Weighted-vote class labels `(n,)` (values of `classes_`)."""
        return self._labels(self.decision_function(x))

    def staged_predict(self, x):
        """Yields the predicted labels after each round; the last equals `predict(x)`."""
        for decision in self.staged_decision_function(x):
            yield self._labels(decision)

    def predict_proba(self, x):
        """Class probabilities float64 `(n, K)`: softmax of decision / (K - 1) (Zhu et al. 2009, eq. 15)."""
        decision = self.decision_function(x)
        if self.n_classes_ == 2:
            return softmax(np.vstack([-decision, decision]).T / 2, copy=False)
        return softmax(decision / (self.n_classes_ - 1), copy=False)

    def staged_score(self, x, y, sample_weight=None):
        """Yields the (weighted) accuracy on `(x, y)` after each round, one value per fitted round."""
        from sklearn.metrics import accuracy_score

        for pred in self.staged_predict(x):
            yield accuracy_score(y, pred, sample_weight=sample_weight)

    def as_ensemble(self):
        """The fitted rounds as a `gradkit.WeightedEnsemble(estimators_, estimator_weights_)`.

        Raises:
            TypeError: the learners are not Keras models (no input gradients exist).
        """
        check_is_fitted(self)
        if not all(_is_keras(m) for m in self.estimators_):
            raise TypeError(
                "as_ensemble() needs Keras learners; this fit holds "
                f"{type(self.estimators_[0]).__name__} learners."
            )
        # One ensemble object per fitted state, so attacks reuse its compiled gradient (cached on it).
        key = (tuple(id(m) for m in self.estimators_), tuple(float(w) for w in self.estimator_weights_))
        cached = vars(self).get("_gradkit_ensemble")
        if cached is None or cached[0] != key:
            cached = (key, WeightedEnsemble(self.estimators_, self.estimator_weights_))
            vars(self)["_gradkit_ensemble"] = cached
        return cached[1]

    def save(self, path):
        """Saves the fit as a directory (see `gradkit.persistence.save`); reload with `gradkit.load`."""
        check_is_fitted(self)
        persistence.save(self, path)


class AdaBoostM1(BaseBoosting):
    """AdaBoost.M1 (Freund & Schapire 1996) over Keras networks (or scikit-learn style learners).

    Learner weight alpha_t = ln((1 - e_t) / e_t); stops at e_t >= 1/2 (see the module docstring for
    the weights, the stopping rules and the references). For K = 2 it equals `SAMME`.

    Args:
        build_fn: callable with no arguments returning a fresh learner each round: a compiled
            keras.Model with K output units (or 1 sigmoid unit when K = 2), or any object with
            `fit(x, y, sample_weight=...)` and `predict(x)` (e.g. a scikit-learn decision stump), which
            gets class ids 0..K-1. It is called once at the start of `fit` and checked before training.
        n_estimators: maximum number of rounds, >= 1. Defaults to 10.
        fit_kwargs: dict passed to each learner's `fit` (e.g. `{"epochs": 5, "batch_size": 32}`;
            Keras learners default to `verbose=0`). Defaults to None.
        random_state: int seed or None. With an int, `keras.utils.set_random_seed(random_state + t)`
            runs before round t is built (this reseeds Python, numpy and the backend globally), so
            every round is reproducible and a resumed fit equals an uninterrupted one. Defaults to None.
        adversarial: None, or a dict `{"attack": "fgsm" | "pgd", "eps": float, **attack kwargs}` (see
            `SAMME`). Defaults to None.
        checkpoint_dir: directory where the fit is saved atomically after every round (Keras
            learners only), and that `fit(..., resume=True)` resumes from. Defaults to None.
        verbose: 0 silent; >= 1 one line per round (error, alpha, seconds). Defaults to 1.

    Attributes:
        estimators_, estimator_weights_, estimator_errors_: the fitted rounds only (float64 arrays).
        classes_: `np.unique(y)`. n_classes_: K.

    References:
        Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
        https://dl.acm.org/doi/10.5555/3091696.3091715
    """

    def __init__(
        self,
        build_fn,
        *,
        n_estimators=10,
        fit_kwargs=None,
        random_state=None,
        adversarial=None,
        checkpoint_dir=None,
        verbose=1,
    ):
        self.build_fn = build_fn
        self.n_estimators = n_estimators
        self.fit_kwargs = fit_kwargs
        self.random_state = random_state
        self.adversarial = adversarial
        self.checkpoint_dir = checkpoint_dir
        self.verbose = verbose

    def _alpha(self, error, n_classes):
        return float(np.log((1.0 - error) / error))

    def _max_error(self, n_classes):
        return 0.5


class SAMME(BaseBoosting):
    """SAMME, multi-class AdaBoost (Zhu et al. 2009), over Keras networks or scikit-learn learners.

    alpha_t = learning_rate * (ln((1 - e_t) / e_t) + ln(K - 1)); stops at e_t >= 1 - 1/K. With a
    deterministic learner it reproduces `sklearn.ensemble.AdaBoostClassifier` (weights, errors,
    decision function, probabilities, predictions).

    Adversarial boosting (`adversarial=`): in round t > 0 the attack is run through `gradkit.fgsm` /
    `gradkit.pgd` against the ensemble of rounds 0..t-1 (`WeightedEnsemble`, true labels), and the new
    learner trains on the clean samples plus their adversarial copies, copy i carrying boosting weight
    w_i. Round 0 has no ensemble: its learner is first trained on the clean data, attacked, then
    trained further on clean plus adversarial. Errors, alphas and weight updates use the clean
    samples only. Other keys of the dict (eps_step, steps, norm, clip_values, ...) go to the attack.

    Args:
        build_fn, n_estimators, fit_kwargs, random_state, adversarial, checkpoint_dir, verbose: see
            `AdaBoostM1`.
        learning_rate: shrinkage of every alpha_t, > 0. Defaults to 1.0.

    References:
        Zhu, Zou, Rosset & Hastie (2009), "Multi-class AdaBoost", Statistics and Its Interface 2(3),
        https://doi.org/10.4310/SII.2009.v2.n3.a8

    Example:
        >>> stump = lambda: DecisionTreeClassifier(max_depth=1)       # doctest: +SKIP
        >>> clf = SAMME(stump, n_estimators=20).fit(x, y)             # doctest: +SKIP
        >>> clf.predict(x)                                            # doctest: +SKIP
    """

    def __init__(
        self,
        build_fn,
        *,
        n_estimators=10,
        learning_rate=1.0,
        fit_kwargs=None,
        random_state=None,
        adversarial=None,
        checkpoint_dir=None,
        verbose=1,
    ):
        self.build_fn = build_fn
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.fit_kwargs = fit_kwargs
        self.random_state = random_state
        self.adversarial = adversarial
        self.checkpoint_dir = checkpoint_dir
        self.verbose = verbose

    def _alpha(self, error, n_classes):
        return float(self.learning_rate * (np.log((1.0 - error) / error) + np.log(n_classes - 1.0)))

    def _max_error(self, n_classes):
        return 1.0 - 1.0 / n_classes
