"""`BaseBoosting`: the boosting loop that `AdaBoostM1` and `SAMME` share.

Structure (as scikit-learn's `_weight_boosting.py`): `__init__` only stores the parameters; `fit`
checks them (`_params.py`) and the data (`_data.py`), then calls the per-round hook `_boost` once per
round; a concrete class supplies only its learner weight `_alpha` and its stopping rule `_max_error`
(`_adaboost.py`). Learners are checked, trained and read in `_learners.py`; the decision is built on
the ensemble's weighted vote in `_voting.py`; saves and checkpoints go through `_checkpoint.py`.
"""

import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted
from tqdm import tqdm

from gradkit import backend
from gradkit.boosting import _adversarial, _checkpoint, _data, _describe, _learners, _params, _voting
from gradkit.errors import WorseThanRandomError
from gradkit.gradients import WeightedEnsemble, check_x


class BaseBoosting(_voting.VotingMixin, ClassifierMixin, BaseEstimator):
    """Boosting of Keras networks (or scikit-learn style learners); subclasses set `_alpha` and `_max_error`.

    See `AdaBoostM1` for the parameters. Not used directly.
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
        """The weight alpha_t of a learner of weighted error 0 < `error` < `_max_error(n_classes)`."""
        raise NotImplementedError

    def _max_error(self, n_classes):
        """The weighted error at or above which a learner is worse than random."""
        raise NotImplementedError

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
            ValueError: bad parameters or data, one class, a checkpoint made on other data or
                settings, a `build_fn` that builds another architecture than the resumed members, or
                more rounds than `n_estimators`.
            WorseThanRandomError: (a ValueError) the first learner is worse than random; nothing is
                kept (a later such learner is discarded and boosting stops, see `stop_reason_`).
            TypeError: a `build_fn` that returns neither a compiled Keras model nor an object with
                fit(x, y, sample_weight=...) and predict(x).
        """
        _params.check_params(self)
        x, ids, classes, w0 = _data.check_data(x, y, sample_weight)
        fingerprint = _data.fingerprint(x, ids, w0, classes)
        if not (resume and _checkpoint.resume(self, fingerprint)):
            self.estimators_, self.estimator_weights_, self.estimator_errors_ = [], np.zeros(0), np.zeros(0)
            self.classes_, self.n_classes_ = classes, len(classes)
            self._sample_weight, self._finished, self._fingerprint = w0.copy(), False, fingerprint
            self.stop_reason_, self._checkpoint_files = None, None  # stop_reason_: why boosting stopped early
        start = len(self.estimators_)
        if start > self.n_estimators:
            raise ValueError(
                f"The fit to resume has {start} rounds, more than n_estimators={self.n_estimators}."
            )
        if self._finished or start == self.n_estimators:
            return self
        learner = self._new_learner(start)
        _learners.check_learner(learner, x, self.n_classes_, self.adversarial, self.checkpoint_dir)
        _learners.check_same_architecture(learner, self.estimators_)
        zero = w0 == 0
        for t in range(start, self.n_estimators):
            learner = learner if t == start else self._new_learner(t)
            if not self._boost(t, learner, x, ids, zero):
                break
        return self

    def _new_learner(self, t):
        if self.random_state is not None:
            backend.set_random_seed(int(self.random_state) + t)
        return self.build_fn()

    def _boost(self, t, learner, x, ids, zero):
        """The per-round hook: trains `learner`, then keeps it or stops. Returns False when boosting stops."""
        tic = time.perf_counter()
        if any(learner is m for m in self.estimators_):
            raise ValueError("`build_fn` must return a new learner on every call, not the same object.")
        w = np.clip(self._sample_weight, np.finfo(np.float64).eps, None)
        w[zero] = 0.0  # zero initial weights stay zero, the others are clipped as in scikit-learn
        x_adv = self._train(t, learner, x, ids, w)
        incorrect = _learners.predict_ids(learner, x, self.n_classes_) != ids
        if x_adv is not None:  # adversarial: wrong on the clean point or on its adversarial copy
            incorrect |= _learners.predict_ids(learner, x_adv, self.n_classes_) != ids
        error, limit = float(np.average(incorrect, weights=w)), self._max_error(self.n_classes_)
        if error >= limit:
            if t == 0:
                raise WorseThanRandomError(
                    f"The first learner is worse than random: weighted error {error:.4f} >= {limit:.4f} "
                    f"for {type(self).__name__} with {self.n_classes_} classes. Usual causes: unscaled "
                    "inputs (pixels in [0, 255]: divide by 255), too few epochs or samples per round "
                    "(fit_kwargs), or a learner too weak for the task."
                    + (
                        " With `adversarial`, the error counts the adversarial examples too: an eps too "
                        "large for the task (try a smaller adversarial['eps'])."
                        if self.adversarial
                        else ""
                    )
                )
            self._log(t, f"error: {error:.4f} >= {limit:.4f}, learner discarded, boosting stopped", tic)
            self._finished = True
            self.stop_reason_ = f"round {t + 1} worse than random (weighted error {error:.4f} >= {limit:.4f})"
        else:
            alpha = 1.0 if error <= 0 else self._alpha(error, self.n_classes_)
            self._keep(t, learner, error, alpha, w, incorrect)
            perfect = " - perfect, boosting stopped" if error <= 0 else ""
            self._log(t, f"error: {error:.4f} - alpha: {alpha:.4f}", tic, perfect)
        self._checkpoint()
        return not self._finished

    def _keep(self, t, learner, error, alpha, w, incorrect):
        """Adds the round and reweights: w_i <- w_i exp(alpha [h_t(x_i) != y_i]), renormalized to sum 1."""
        with np.errstate(divide="ignore"):
            new_w = np.exp(np.log(w) + alpha * incorrect * (w > 0))
        self.estimators_.append(learner)
        self.estimator_weights_ = np.append(self.estimator_weights_, alpha)
        self.estimator_errors_ = np.append(self.estimator_errors_, max(error, 0.0))
        self._finished = error <= 0 or not np.isfinite(new_w.sum())
        self.stop_reason_ = f"round {t + 1} perfect (weighted error 0)" if error <= 0 else None
        if not np.isfinite(new_w.sum()):
            self.stop_reason_ = f"sample weights overflowed at round {t + 1}"
            warnings.warn(f"Sample weights overflowed at round {t + 1}; boosting stopped.", stacklevel=4)
        else:
            self._sample_weight = new_w / new_w.sum()

    def _train(self, t, learner, x, ids, w):
        """Fits `learner` on the weights `w` (sum 1; scikit-learn estimators get them as `AdaBoostClassifier`
        hands them, others rescaled to mean 1). Returns the round's adversarial examples, else None."""
        kwargs = dict(self.fit_kwargs or {})
        if _learners.is_sklearn(learner):
            learner.fit(x, ids, sample_weight=w, **kwargs)
            return
        sw = w * (len(w) / w.sum())  # mean 1: the learner's loss (the optimizer's step) keeps its scale
        if not _learners.is_keras(learner):
            learner.fit(x, ids, sample_weight=sw, **kwargs)
            return
        kwargs.setdefault("verbose", 0)
        targets = _learners.keras_targets(learner, ids, self.n_classes_, x)
        if self.adversarial is not None:  # the round is judged on the examples it trained against
            ensemble = WeightedEnsemble(self.estimators_, self.estimator_weights_) if t else None
            return _adversarial.train_round(learner, x, ids, targets, sw, self.adversarial, kwargs, ensemble)
        learner.fit(x, targets, sample_weight=sw, **kwargs)

    def _log(self, t, line, tic, end=""):
        if self.verbose:
            tqdm.write(f"Round {t + 1}/{self.n_estimators} - {line} - {time.perf_counter() - tic:.1f}s{end}")

    def _checkpoint(self):
        if self.checkpoint_dir is not None:
            _checkpoint.save(self, self.checkpoint_dir)

    def _member_ids(self, x):
        check_is_fitted(self)
        if all(_learners.is_keras(m) for m in self.estimators_):  # the input shape checked before predicting
            x, _ = check_x(self.estimators_[0], x, require_float=False)
        return [_learners.predict_ids(m, x, self.n_classes_) for m in self.estimators_]

    def as_ensemble(self):
        """The fitted rounds as a `gradkit.gradients.WeightedEnsemble(estimators_, estimator_weights_)`.

        One ensemble object per fitted state, so attacks reuse its compiled gradient (cached on it).

        Raises:
            TypeError: the learners are not Keras models (no input gradients exist).
        """
        check_is_fitted(self)
        if not all(_learners.is_keras(m) for m in self.estimators_):
            kind = type(self.estimators_[0]).__name__
            raise TypeError(f"as_ensemble() needs Keras learners; this fit holds {kind} learners.")
        key = (tuple(id(m) for m in self.estimators_), tuple(float(w) for w in self.estimator_weights_))
        cached = vars(self).get("_gradkit_ensemble")
        if cached is None or cached[0] != key:
            cached = (key, WeightedEnsemble(self.estimators_, self.estimator_weights_))
            vars(self)["_gradkit_ensemble"] = cached
        return cached[1]

    def describe(self, x=None, y=None):
        """What the fitted ensemble is: `gradkit.boosting.describe(self, x, y)` (members outvoted by the
        heaviest one, each member's share of the summed input gradient at `(x, y)`, the stop reason)."""
        return _describe.describe(self, x, y)

    def save(self, path):
        """Saves the fit as a directory (`boost.json` and one `.keras` file per round), atomically.

        Reload it with `gradkit.boosting.load`. Raises TypeError for learners that are not Keras models.
        """
        check_is_fitted(self)
        _checkpoint.save(self, path)
