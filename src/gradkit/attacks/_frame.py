"""The model normalised once for an attack, its checked batch, and the recorder of what an attack did.

A `Frame` is built by every attack at its start: the object compiled functions are cached on (`owner`),
the ensemble, the input gradient and the compiled objective of the attack's loss, the checked clean
inputs `x0` and labels, the number of classes and the clip range; later code takes the frame, never
the raw model. It counts the rows each attack evaluates with and without a gradient. Inside
`recording()` the first frame built is kept with what the attack reports (its per-sample success),
so that `run_attack` needs no second version of each attack.
"""

import contextlib
import contextvars
import dataclasses

import keras
import numpy as np
from keras import tree

from gradkit import _checks, _keras_internals, backend
from gradkit._checks import broadcast_box, check_clip, check_mask
from gradkit.attacks import _inputs
from gradkit.gradients import (
    AttackGradient,
    InputGradient,
    WeightedEnsemble,
    as_ensemble,
    cached,
    check_attack_loss,
    check_classifier,
    check_x,
    compiled_spec,
    input_names,
    n_outputs,
    output_index,
    output_shape,
    outputs_are_logits,
    preprocessed,
    row_shape,
)

OBJECTIVE_LOSSES = ("ce", "dlr", "margin")
LAYOUTS = ("channels_last", "channels_first")
_VALUES_PER_CALL = 1 << 22  # the default batch where rows are cheap to retrace: at most this many values


def owner(model):
    """The object compiled functions are cached on: the model or ensemble itself, or the ensemble of a
    boosting estimator (`as_ensemble()`)."""
    return model if isinstance(model, (keras.Model, WeightedEnsemble)) else as_ensemble(model)


def default_batch(x0):
    """The rows per compiled call when the caller gives no `batch_size`: min(256, next power of two >=
    n), or where a new row count costs little (`backend.ROW_QUANTUM`) as many rows as hold 2**22 input
    values, at least the quantum (APGD-T's targets run together, and every call has a fixed cost)."""
    n = len(x0)
    if backend.ROW_QUANTUM:
        return max(backend.ROW_QUANTUM, _VALUES_PER_CALL // max(x0[0].size, 1))
    return min(256, 1 << (n - 1).bit_length())


def step_for(
    model, grad, *, loss, objective, targeted, output, batch_size, temperature=1.0, eot_iter=1, surrogate=None
):
    """The cached `AttackGradient` for a classifier objective, or None where only `grad` applies.

    `eot_iter` (forward passes averaged per step, EOT) and `surrogate` (BPDA) are `AttackGradient`'s.
    A Keras cross-entropy (the compiled one or `loss=`) is attacked as "ce" on the logits. None when the
    loss is a Keras loss other than cross-entropy (regression), or for an ensemble with
    `normalize_gradients=True` (per-member normalization lives in `InputGradient`).
    """
    if isinstance(loss, str) and loss in OBJECTIVE_LOSSES:
        name = loss
    else:  # a Keras cross-entropy (compiled or given, any spelling) is attacked as "ce"
        name = "ce" if grad.spec.is_classification else None
        if name:  # "ce" has no label smoothing nor ignored class: refused rather than dropped
            check_attack_loss(grad.spec)
    if name is None or grad.ensemble.normalize_gradients:
        _refuse_options(eot_iter, surrogate, objective)
        return None
    options = dict(
        loss=name,
        combination=objective,
        targeted=targeted,
        output=output,
        batch_size=batch_size,
        temperature=temperature,
        eot_iter=eot_iter,
    )

    def factory():
        return AttackGradient(owner(model), surrogate=surrogate, **options)

    key = None if surrogate is None else id(surrogate)  # a model's repr is not unique; the entry keeps it
    return cached(owner(model), "attack", factory, surrogate=key, **options)


def _refuse_options(eot_iter, surrogate, objective):
    if eot_iter != 1 or surrogate is not None:
        raise ValueError(
            "`eot_iter` and `surrogate` need a classification loss (ce, dlr or margin) and an ensemble "
            f"without normalize_gradients. Received: eot_iter={eot_iter!r}, surrogate={surrogate!r}"
        )
    if objective != "loss_sum":
        raise ValueError(
            "`objective` other than 'loss_sum' needs a classification loss (ce, dlr or margin) and an "
            f"ensemble without normalize_gradients. Received: objective={objective!r}"
        )


def _default_loss(model, output):
    """The Keras loss labels are checked against for an objective loss ("ce", "dlr", "margin"): the
    compiled one if any, else binary cross-entropy on a one-unit output (a binary classifier, labels 0/1)
    and sparse categorical cross-entropy otherwise, on logits or probabilities as `outputs_are_logits`
    reads the output."""
    first = as_ensemble(model).models[0]
    if getattr(first, "loss", None) and compiled_spec(first, output_index(first, output)).is_classification:
        return None  # labels as the compiled classification loss takes them; a regression loss is not one
    index = output_index(first, output)
    from_logits = outputs_are_logits(first, index)
    if n_outputs(first, index) == 1:
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def gradient_for(model, *, loss=None, output=None, batch_size=None):
    """The `InputGradient` (inference mode) for `model`, cached on the model or ensemble object.

    Attacks with the same `(loss, output, batch_size)` on the same object reuse one compiled function,
    so a robustness curve over many epsilons traces once (`.trace_count`). Keras models share the cache
    of `gradkit.input_gradient`. Other objects (boosting estimators) are turned into an ensemble with
    `as_ensemble`, and the cache lives on that ensemble. `loss=None` on a model compiled without a loss
    means "ce" (the cross-entropy of its logits).
    """
    model = owner(model)
    if loss is None and not getattr(as_ensemble(model).models[0], "loss", None):
        loss = "ce"  # an uncompiled classifier is attacked through its cross-entropy, as APGD-CE does
    keras_loss = _default_loss(model, output) if loss in OBJECTIVE_LOSSES else loss

    def factory():
        return InputGradient(model, loss=keras_loss, training=False, output=output, batch_size=batch_size)

    return cached(model, "input", factory, loss=loss, training=False, output=output, batch_size=batch_size)


def _leaf_names(x):
    if isinstance(x, dict):
        return list(x)
    if isinstance(x, (list, tuple)):
        return [f"x[{i}]" for i in range(len(x))]
    return ["x"]


def check_eps(eps, norm, name="eps"):
    """The attack budget checked before any work.

    Args:
        eps: float >= 0 (input units), or for Linf a per-feature budget: an array of finite values >= 0
            broadcastable to one input's shape.
        norm: the checked norm (np.inf, 2.0 or 1.0).
        name: the argument's name in messages. Defaults to "eps".

    Returns:
        The float, or the float32 array.

    Raises:
        ValueError: a negative or non-finite value, or an array with a norm other than Linf.
        TypeError: a value that is not a number or an array of numbers.
    """
    if np.ndim(eps) == 0:
        return _checks.check_eps(eps, name)
    if norm != np.inf:
        raise ValueError(
            f"`{name}` as an array (a per-feature budget) needs norm=np.inf: an L2 or L1 ball has one "
            f"radius. Received: {name} of shape {np.shape(eps)} with norm={norm!r}"
        )
    try:
        values = np.asarray(eps, np.float32)
    except (TypeError, ValueError):
        _checks.fail(name, "a finite number >= 0 or an array of them", eps, TypeError)
    if not np.isfinite(values).all() or (values < 0).any():
        _checks.fail(name, "a finite number >= 0 or an array of them (per feature, Linf)", eps)
    return values


def broadcast_eps(eps, x0):
    """`eps` (`check_eps`) for the checked batch `x0` `(n, ...)`: a number as given, a per-feature
    array as float32 `(1, *x0.shape[1:])`; ValueError naming `eps` where it does not broadcast."""
    if np.ndim(eps) == 0:
        return eps
    try:
        return np.ascontiguousarray(np.broadcast_to(eps, x0.shape[1:])[None], np.float32)
    except ValueError:
        raise ValueError(
            f"`eps` must broadcast to one input's shape {tuple(x0.shape[1:])}. Received: eps of shape "
            f"{np.shape(eps)}"
        ) from None


def check_range(x, clip_values):
    """Raises ValueError when a leaf of the validated `x` lies outside `clip_values`."""
    if clip_values is None:
        return
    lo, hi = clip_values
    for name, leaf in zip(_leaf_names(x), tree.flatten(x)):
        if np.ndim(lo):
            if (leaf < lo).any() or (leaf > hi).any():
                raise ValueError(
                    f"`x` must lie inside its per-feature clip_values (input {name!r} leaves them at "
                    f"{int(((leaf < lo) | (leaf > hi)).sum())} values): the attack could not keep it in range"
                )
        elif leaf.min() < lo or leaf.max() > hi:
            raise ValueError(
                f"`x` must lie inside clip_values={clip_values} (input {name!r} spans "
                f"[{leaf.min()}, {leaf.max()}]): the attack could not keep it in range otherwise."
            )


def step_function(objective, name, update, mask, **static):
    """`objective.step_function(name, update, **static)`; with a `mask` (not None) the gradient is
    multiplied by `fixed["mask"]` before `update` sees it, so that no direction, step or norm counts a
    feature that may not change (their coordinates of the step are then exactly 0)."""
    if mask is None:
        return objective.step_function(name, update, **static)

    def masked(state, aux, grad, fixed):
        return update(state, aux, tree.map_structure(lambda g: g * fixed["mask"], grad), fixed)

    return objective.step_function(name, masked, **static, mask=True)


def predict_labels(grad, x, batch_size=None):
    """Hard predictions `(n,)` int64 of the attacked output: the weighted hard vote of
    `WeightedEnsemble.predict`, reading one-unit outputs as the attack's loss does (logits or not)."""
    votes = grad.ensemble.decision_function(
        x, batch_size or 256, output=grad.output_index, from_logits=[spec.from_logits for spec in grad.specs]
    )
    return votes.argmax(axis=1)


def prepare(grad, x, y, clip_values, batch_size=None):
    """Validated `(x, labels, n)`; `y=None` becomes the model's hard predictions (validated first)."""
    check_classifiers(grad, x)
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


def check_single_input(model, x, name):
    """TypeError before any work where `name` (an entry point for single-input models: "APGD",
    "evaluate", "min_norm", ...) is given several input arrays or a model (or ensemble member) with
    several inputs; every such entry point says it in these same words.

    Args:
        model: a Keras model, a `gradkit.WeightedEnsemble` or an object with `as_ensemble()`.
        x: the user's inputs (one array, or a list/tuple/dict of arrays).
        name: the entry point named in the message.
    """
    if isinstance(x, (list, tuple, dict)):
        raise TypeError(
            f"`x` must be one array: {name} attacks single-input models. Received: x of type "
            f"{type(x).__name__} (use gradkit.pgd for several inputs)"
        )
    for member in as_ensemble(model).models:
        names = input_names(member)
        if len(names) > 1:
            raise TypeError(
                f"`model` must have one input: {name} attacks single-input models. Received: a model "
                f"with {len(names)} inputs {names} (use gradkit.pgd for several inputs)"
            )


def data_format(model):
    """The image layout the model reads, "channels_last" `(n, h, w, c)` or "channels_first" `(n, c, h,
    w)`, or None where its layers disagree.

    Read from the `data_format` of its layers that take images (convolutions, pooling, padding,
    cropping, upsampling; every ensemble member's, nested models included; not `Flatten`, whose
    setting orders the flattening and defaults to the global one); a wrapped PyTorch module
    (`keras.layers.TorchModuleWrapper`) reads `(n, c, h, w)`, the layout of PyTorch's own convolution
    and pooling modules. A model without such layers (dense layers on images) follows
    `keras.config.image_data_format()`.
    """
    found = set()
    for member in as_ensemble(model).models:
        for layer in _keras_internals.flat_layers(member):
            if type(layer).__name__ == "TorchModuleWrapper":
                found.add("channels_first")
            elif type(layer).__name__ != "Flatten" and getattr(layer, "data_format", None) in LAYOUTS:
                found.add(layer.data_format)
    if not found:
        return keras.config.image_data_format()
    return found.pop() if len(found) == 1 else None


def check_classifiers(grad, x):
    """ValueError before any work unless every member's attacked output is a classifier's (`(n, C)`
    scores; `gradkit.gradients.check_classifier`)."""
    if isinstance(x, (list, tuple, dict)):
        return  # several inputs: the shapes are traced from the checked arrays in `grad.check`
    x, _ = check_x(grad.ensemble.models[0], x)
    for model in grad.ensemble.models:
        check_classifier(model, grad.output_index, output_shape(model, grad.output_index, x))


class Frame:
    """An attack's model and batch, checked and normalised once (see the module docstring).

    Args:
        model: a Keras classifier, a `gradkit.WeightedEnsemble` or a fitted boosting estimator.
        x, y: the user's inputs and labels (`y=None`: the model's hard predictions).
        loss: the attacked loss ("ce", "dlr", "margin", None for the compiled loss, or a Keras loss).
        clip_values, batch_size, output, objective, targeted, temperature, eot_iter, surrogate: as the
            attacks take them (checked here).
        single_input: None (several inputs allowed: the loop of `gradkit.pgd`), or the attack's name for
            the TypeError several inputs get (the attack then needs one array, rows with features, and
            an on-device objective; its batch defaults to `default_batch`).
        y_required: the message of the ValueError for `y=None` (targeted attacks need their targets).
        preprocessing: None, `(mean, std)` or a callable applied to `x` inside the compiled function
            (`gradkit.gradients.preprocessed`): `model` is then the wrapped model.

    Attributes:
        model, owner, grad (`InputGradient`), objective (`AttackGradient`, or None where only host
        gradients exist), x0 (checked inputs), labels (int `(n,)`), n, n_classes (C; 2 for one sigmoid
        unit; single-input frames), clip_values, batch_size (as given), targeted, data_format (the
        image layout, "channels_last" or "channels_first"; None where the layers disagree); n_forwards and
        n_gradients (rows evaluated without / with a gradient so far); success (bool `(n,)`, set by the
        attack when it knows it) and norms (float64 `(n,)`, set by FAB).
    """

    def __init__(
        self,
        model,
        x,
        y,
        *,
        loss,
        clip_values=None,
        mask=None,
        attack_inputs=None,
        batch_size=None,
        output=None,
        objective="loss_sum",
        targeted=False,
        temperature=1.0,
        eot_iter=1,
        surrogate=None,
        single_input=None,
        y_required=None,
        preprocessing=None,
    ):
        model = preprocessed(model, preprocessing, row_shape(x))
        self.inputs = None
        if single_input and _inputs.is_several(model, x):  # one flat row of the inputs, cut back at the end
            self.inputs = _inputs.FlatInputs(
                model, x, attack_inputs=attack_inputs, clip_values=clip_values, mask=mask
            )
            model, x, clip_values, mask = (
                self.inputs.model,
                self.inputs.x,
                self.inputs.clip_values,
                self.inputs.mask,
            )
        elif attack_inputs is not None:
            raise ValueError(
                "`attack_inputs` names inputs of a model of several inputs, given as a list or dict `x`. "
                f"Received: attack_inputs={attack_inputs!r} with x of type {type(x).__name__}"
            )
        self.model, self.owner = model, owner(model)
        self.clip_values, self.mask = check_clip(clip_values), check_mask(mask)
        self.batch_size = _checks.check_batch_size(batch_size)
        self.targeted = _checks.check_flag(targeted, "targeted")
        if y_required and self.targeted and y is None:
            raise ValueError(y_required)
        if single_input:
            check_single_input(model, x, single_input)
        options = dict(
            loss=loss,
            objective=objective,
            targeted=self.targeted,
            output=output,
            temperature=temperature,
            eot_iter=eot_iter,
            surrogate=surrogate,
        )
        self.grad = gradient_for(model, loss=loss, output=output, batch_size=self.batch_size)
        if not single_input:  # the loop's objective is checked before the data, with the caller's batch
            self.objective = step_for(self.owner, self.grad, batch_size=self.batch_size, **options)
        scalar_box = None if self.per_feature else self.clip_values  # per-feature: checked once broadcast
        self.x0, self.labels, self.n = prepare(self.grad, x, y, scalar_box, self.batch_size)
        if self.per_feature or self.mask is not None:
            self.clip_values, self.mask = broadcast_box(self.clip_values, self.mask, self.x0)
            check_range(self.x0, self.clip_values)
        self.n_forwards = self.n_gradients = 0
        self.success = self.norms = None
        if single_input:
            self._on_device(loss, options)
        _register(self)

    def _on_device(self, loss, options):
        if self.x0.ndim < 2:
            raise ValueError(f"`x` must have a batch axis and features. Received: x.shape={self.x0.shape}")
        batch = self.batch_size or default_batch(self.x0)
        self.objective = step_for(self.owner, self.grad, batch_size=batch, **options)
        if self.objective is None:
            raise ValueError(f"`loss` must be one of 'ce', 'dlr', 'margin'. Received: loss={loss!r}")
        classes = n_outputs(self.grad.ensemble.models[0], self.grad.output_index, self.x0)
        self.n_classes = 2 if classes == 1 else classes

    @property
    def per_feature(self):
        """Whether the clip bounds are per-feature arrays."""
        return self.clip_values is not None and bool(np.ndim(self.clip_values[0]))

    def tensors(self):
        """The mask as a tensor of `fixed` (`{"mask": ...}`), or {} without one."""
        return {} if self.mask is None else {"mask": backend.to_tensor(self.mask)}

    def keep_masked(self, x_adv, x0=None):
        """`x_adv` with the features the mask holds fixed set back to the clean ones `x0` (default: the
        frame's), bit for bit."""
        x0 = self.x0 if x0 is None else x0
        return x_adv if self.mask is None else np.where(self.mask > 0, x_adv, x0).astype(x_adv.dtype)

    def finish(self, x_adv):
        """The attack's result: `keep_masked(x_adv)` in the user's structure of inputs (a model of
        several inputs: `FlatInputs.unflatten`)."""
        x_adv = self.keep_masked(x_adv)
        return x_adv if self.inputs is None else self.inputs.unflatten(x_adv)

    @property
    def data_format(self):
        """The model's image layout (`data_format(model)`), read once; None where it cannot be told."""
        if not hasattr(self, "_data_format"):
            self._data_format = data_format(self.model)
        return self._data_format

    def as_float32(self):
        """The clean inputs as float32 and the labels as int32 (the minimum-norm attacks' state)."""
        self.x0, self.labels = self.x0.astype(np.float32, copy=False), self.labels.astype(np.int32)
        return self

    def step(self, x, labels, targets):
        """`(values, predictions, grad)` on the given rows, counted."""
        values, logits, grad = self.objective(x, labels, targets)
        self.n_gradients += len(labels)
        return values, self.objective.decide(logits), grad

    def forward(self, x, labels, targets):
        """`(values, predictions)` on the given rows, counted."""
        return self.bind(labels, targets)(x)

    def bind(self, labels, targets):
        """`forward` on rows whose labels and targets stay fixed: `bound(x) -> (values, predictions)`,
        counted (see `AttackGradient.bind`)."""
        bound = self.objective.bind(labels, targets)

        def forward(x):
            values, logits = bound(x)
            self.n_forwards += len(labels)
            return values, self.objective.decide(logits)

        return forward

    def predict(self, x):
        """The real decision `(n,)` on `x` (argmax, or an ensemble's weighted hard vote), counted."""
        return self.forward(x, self.labels, None)[1]

    def top_classes(self, k):
        """`(n, k)`: for each sample, its k most likely classes other than its TRUE label, by the clean
        logits (the weighted mean over members for an ensemble), most likely first (AutoAttack's APGD-T
        targets; a target is never the label, so success always means misclassification)."""
        _, logits = self.objective.forward(self.x0, self.labels)
        weights = np.asarray(self.objective.ensemble.weights).reshape(-1, 1, 1)
        scores = (weights * logits).sum(axis=0)
        scores[np.arange(len(scores)), self.labels] = -np.inf
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@dataclasses.dataclass
class Record:
    """What one attack call did, read after `recording()` ends (see `gradkit.attacks.recording`)."""

    frame: Frame | None = None

    @property
    def success(self):
        """bool `(n,)`: which points the attack fooled on the model's real decision rule, or None where
        the attack does not report it (FGSM, BIM, PGD: judge `decide(model, x_adv)`)."""
        return None if self.frame is None else self.frame.success

    @property
    def norms(self):
        """float64 `(n,)`: FAB's smallest perturbation per point (0: misclassified clean; inf: none)."""
        return None if self.frame is None else self.frame.norms

    @property
    def n_forwards(self):
        """Rows the attack evaluated without a gradient."""
        return 0 if self.frame is None else self.frame.n_forwards

    @property
    def n_gradients(self):
        """Rows the attack evaluated with a gradient (counted by APGD, FAB and Square)."""
        return 0 if self.frame is None else self.frame.n_gradients

    @property
    def from_probabilities(self):
        """Whether log-probabilities stood in for the logits of some member (no logits in the graph)."""
        objective = None if self.frame is None else self.frame.objective
        return objective is not None and any(objective.from_probabilities)


_RECORD = contextvars.ContextVar("gradkit_attack_record", default=None)


@contextlib.contextmanager
def recording():
    """Records the next attack called inside the block: yields a `Record` whose `success`,
    `n_forwards`, `n_gradients`, `norms` and `from_probabilities` describe that call.

    Example:
        >>> with gradkit.attacks.recording() as record:  # doctest: +SKIP
        ...     x_adv = gradkit.apgd(model, x, y, eps=8 / 255)
        >>> record.success.mean(), record.n_gradients  # doctest: +SKIP
    """
    record = Record()
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


def _register(frame):
    record = _RECORD.get()
    if record is not None and record.frame is None:
        record.frame = frame
