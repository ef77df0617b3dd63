"""`WeightedEnsemble`: K Keras classifiers with non-negative weights alpha_k."""

import keras
import numpy as np
from keras import tree

from gradkit import _checks
from gradkit.gradients._batches import predict_batched
from gradkit.gradients._decision import check_classifier, outputs_are_logits
from gradkit.gradients._model_io import check_model
from gradkit.gradients._outputs import output_index, output_key, select_output


def _shapes(tensors):
    return [tuple(t.shape[1:]) for t in tensors or []]


def _check_same_shapes(models):
    """Raises ValueError when members' known input or output shapes differ (subclassed ones skip)."""
    first = next((m for m in models if getattr(m, "outputs", None)), None)
    for i, model in enumerate(models):
        if first is None or not getattr(model, "outputs", None):
            continue
        for what in ("inputs", "outputs"):
            mine, theirs = _shapes(getattr(model, what)), _shapes(getattr(first, what))
            if mine != theirs:
                raise ValueError(
                    f"`models` must share input and output shapes: `models[{i}]` has {what} of shape "
                    f"{mine} (batch axis left out), another member {theirs}."
                )


class WeightedEnsemble:
    """A weighted ensemble of Keras classifiers, as built by boosting.

    Its loss is the weighted sum of the members' losses, sum_k alpha_k * L(y, f_k(x)), so its input
    gradient is sum_k alpha_k * grad_x L(y, f_k(x)) (the gradient used to attack AdaBoost ensembles).
    gradkit computes all K members' gradients in one compiled call.

    Args:
        models: sequence of K >= 1 built Keras models with the same input and output shapes.
        weights: sequence of K finite, non-negative floats alpha_k, not all zero. Defaults to equal
            weights 1/K.
        normalize_gradients: when True, each member's per-sample input gradient is divided by its L2
            norm (over all input features) before weighting, so that one member with large gradients
            does not dominate the sign. Defaults to False.

    Raises:
        ValueError: empty `models`, members whose input or output shapes differ (where Keras knows
            them: not for subclassed models), a length mismatch, or negative/non-finite/all-zero
            `weights`.
        TypeError: a member that is not a Keras model, or `normalize_gradients` not a bool.

    Example:
        >>> ens = WeightedEnsemble([m1, m2], [0.7, 0.3])      # doctest: +SKIP
        >>> ens.predict(x)        # weighted hard vote, shape (n,), int64  # doctest: +SKIP
    """

    def __init__(self, models, weights=None, *, normalize_gradients=False):
        models = list(models)
        if not models:
            raise ValueError("`models` must hold at least one Keras model. Received: models=[]")
        for i, model in enumerate(models):
            check_model(model, f"models[{i}]")
        _check_same_shapes(models)
        if weights is None:
            weights = np.full(len(models), 1.0 / len(models))
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(models),):
            raise ValueError(
                f"`weights` must have one entry per model ({len(models)}). Received: shape {w.shape}"
            )
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ValueError(
                f"`weights` must be finite, >= 0 and not all zero. Received: weights={w.tolist()}"
            )
        self.models = tuple(models)
        self.weights = tuple(float(v) for v in w)
        self.normalize_gradients = _checks.check_flag(normalize_gradients, "normalize_gradients")

    def __len__(self):
        return len(self.models)

    def _member_proba(self, model, x, batch_size, output=None, from_logits=None):
        """Class probabilities `(n, n_classes)` float64 of one member's `output`.

        `from_logits` None: read by `outputs_are_logits` (the compiled loss, else the output layer).
        """
        index = output_index(model, output)
        out = predict_batched(model, x, batch_size)
        out = np.asarray(select_output(out, output_key(model, index)), dtype=np.float64)
        if from_logits is None:
            check_classifier(model, index, out.shape)
        out = out.reshape(len(out), -1)
        if from_logits is None:
            from_logits = outputs_are_logits(model, index)
        if out.shape[-1] == 1:  # one sigmoid unit: P(class 1), class 1 when > 0.5 (see `_decision`)
            p = 1.0 / (1.0 + np.exp(-out)) if from_logits else out
            return np.concatenate([1.0 - p, p], axis=-1)
        if from_logits:
            out = np.exp(out - out.max(axis=-1, keepdims=True))
            out /= out.sum(axis=-1, keepdims=True)
        return out

    def predict_proba(self, x, batch_size=256, *, output=None):
        """Weighted mean of the members' class probabilities.

        Args:
            x: inputs, shaped like the members' inputs, `(n, ...)`.
            batch_size: prediction batch size. Defaults to 256.
            output: name or index of the members' output to use; None (default) for single-output
                members.

        Returns:
            float64 array `(n, n_classes)`, sum_k alpha_k p_k(x) / sum_k alpha_k. Members compiled
            with `from_logits=True` losses have their outputs passed through a softmax (one unit: a
            sigmoid, giving `[1 - p, p]`) first.

        Raises:
            ValueError: `output` is None for multi-output members, or names no output.
        """
        members = zip(self.models, self.weights)
        total = sum(w * self._member_proba(m, x, batch_size, output) for m, w in members)
        return total / sum(self.weights)

    def decision_function(self, x, batch_size=256, *, output=None, from_logits=None):
        """Weighted hard votes: `(n, n_classes)` float64, sum_k alpha_k * onehot(argmax p_k(x)).

        A one-unit output votes for class 1 when p > 0.5 (logit > 0). `output` as in `predict_proba`;
        `from_logits` (one bool per member, or None to read each member's compiled loss) says how to
        read one-unit outputs. Raises ValueError for a bad `output`.
        """
        flags = [None] * len(self.models) if from_logits is None else list(from_logits)
        probas = [self._member_proba(m, x, batch_size, output, f) for m, f in zip(self.models, flags)]
        return weighted_vote([p.argmax(axis=-1) for p in probas], self.weights, probas[0].shape[-1])

    def predict(self, x, *, voting="hard", batch_size=256, output=None):
        """Predicted class ids, `(n,)` int64.

        Args:
            x: inputs `(n, ...)`.
            voting: `"hard"` (default): argmax of the weighted votes (`decision_function`), as
                AdaBoost decides (ties go to the lower class id); `"soft"`: argmax of `predict_proba`.
            batch_size: prediction batch size. Defaults to 256.
            output: name or index of the members' output to use; None (default) for single-output
                members.

        Raises:
            ValueError: `voting` is neither "hard" nor "soft"; a bad `output`.
        """
        if voting == "hard":
            return self.decision_function(x, batch_size, output=output).argmax(axis=-1)
        if voting == "soft":
            return self.predict_proba(x, batch_size, output=output).argmax(axis=-1)
        raise ValueError(f'`voting` must be "hard" or "soft". Received: voting={voting!r}')

    def __repr__(self):
        return f"WeightedEnsemble(k={len(self.models)}, weights={[round(w, 4) for w in self.weights]})"


def weighted_vote(member_ids, weights, n_classes):
    """The weighted hard vote of K classifiers, the decision rule of AdaBoost (Freund & Schapire 1997).

    Args:
        member_ids: K int arrays `(n,)` (or one `(K, n)` array), each member's predicted class ids.
        weights: K non-negative floats alpha_k.
        n_classes: number of classes C.

    Returns:
        float64 `(n, C)`: sum_k alpha_k * onehot(ids_k). Its argmax (ties to the lower id) is the vote.
    """
    eye = np.eye(n_classes)
    return sum(float(w) * eye[np.asarray(ids)] for ids, w in zip(member_ids, weights))


def as_ensemble(model_or_ensemble):
    """A `WeightedEnsemble` for an ensemble or a single model (weight 1)."""
    if isinstance(model_or_ensemble, WeightedEnsemble):
        return model_or_ensemble
    if hasattr(model_or_ensemble, "as_ensemble"):
        return model_or_ensemble.as_ensemble()
    if isinstance(model_or_ensemble, keras.Model):
        return WeightedEnsemble([model_or_ensemble], [1.0])
    raise TypeError(
        "`model` must be a keras.Model, a gradkit.WeightedEnsemble or a fitted boosting estimator. "
        f"Received: {type(model_or_ensemble).__name__}"
    )


def normalize_and_weight(grads, weights):
    """(K, n, ...) member gradients -> sum_k alpha_k g_k / ||g_k||_2 (norm per sample, all inputs)."""
    leaves = tree.flatten(grads)
    k, n = leaves[0].shape[:2]
    sq = sum(np.square(g.reshape(k, n, -1)).sum(axis=-1) for g in leaves)
    scale = np.asarray(weights).reshape(k, 1) / np.maximum(np.sqrt(sq), 1e-12)

    def combine(g):
        return np.einsum("kn,kn...->n...", scale, g)

    return tree.map_structure(combine, grads)
