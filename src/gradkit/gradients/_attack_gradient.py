"""One compiled call per attack step: the per-sample objective, its input gradient and every member's logits
(`AttackGradient`), from which attacks read the real decision rule at every iterate."""

import keras
import numpy as np
from keras import tree

from gradkit import _checks, backend
from gradkit.gradients import _objectives, _randomness, _surrogate
from gradkit.gradients._batches import batches, padded_size, take
from gradkit.gradients._cache import compiled
from gradkit.gradients._decision import member_forward
from gradkit.gradients._ensemble import as_ensemble, weighted_vote
from gradkit.gradients._model_io import jit_compiled, training_kwargs
from gradkit.gradients._outputs import output_index, output_key, select_output


class AttackGradient:
    """Per-sample objective, its gradient w.r.t. x and the members' logits, compiled once for the members (the
    ensemble weights are arguments of the compiled function: ensembles of the same members reuse it).

    Args:
        model: a Keras classifier, a `WeightedEnsemble` or a fitted boosting estimator.
        loss: "ce" (cross-entropy), "dlr" (Croce & Hein 2020) or "margin" (Carlini & Wagner 2017).
        combination: how an ensemble's members are combined, see `gradkit.gradients._objectives.combine`:
            "loss_sum" (default), "logit_mean", "prob_mean" or "vote_margin".
        targeted: whether the objective pulls towards target classes.
        output: name or index of the classifier output, for multi-output models.
        batch_size: rows per compiled call (the last batch is padded); None: all rows at once.
        temperature: the vote's softmax temperature for "vote_margin". Defaults to 1.0.
        eot_iter: int >= 1, forward passes averaged per call (Expectation over Transformation on a
            model with random layers active at inference: each pass a new draw). Defaults to 1.
        surrogate: None (default), or a Keras model or callable on tensors returning the attacked
            output's shape: the gradient is taken through it (BPDA), values and logits are the model's.

    Call (`__call__(x, labels, targets=None)` on validated numpy inputs):
        Returns `(values, logits, grad)`: float64 `(n,)` objective values (to maximize), float32
        `(K, n, C)` member logits, and the float32 gradient of sum(values) shaped like `x`.
    """

    def __init__(
        self,
        model,
        *,
        loss="ce",
        combination="loss_sum",
        targeted=False,
        output=None,
        batch_size=None,
        temperature=1.0,
        eot_iter=1,
        surrogate=None,
    ):
        self.ensemble = as_ensemble(model)
        self.loss = _checks.check_choice(loss, "loss", _objectives.LOSSES)
        self.combination = _checks.check_choice(combination, "objective", _objectives.COMBINATIONS)
        self.targeted = _checks.check_flag(targeted, "targeted")
        self.batch_size = _checks.check_batch_size(batch_size)
        self.temperature = _checks.check_real(temperature, "temperature", minimum=0, strict=True)
        self.eot_iter = _checks.check_int(eot_iter, "eot_iter", minimum=1)
        if surrogate is not None and not callable(surrogate):
            _checks.fail("surrogate", "None, a Keras model or a callable on tensors", surrogate, TypeError)
        self.surrogate = surrogate
        first = self.ensemble.models[0]
        self.output_index = output_index(first, output)
        self._forward, self._keys = [], []
        for member in self.ensemble.models:  # each member's own head of that name
            index = output_index(member, output)
            self._forward.append(member_forward(member, index))
            self._keys.append(output_key(self._forward[-1][0], index))
        self.from_probabilities = [not is_logits for _, is_logits in self._forward]
        sur_logits = _surrogate.surrogate_is_logits
        self._surrogate_is_logits = surrogate is not None and sur_logits(surrogate, first, self.output_index)
        self._kwargs = training_kwargs(first, False)
        self._combine = {n: getattr(self, n) for n in ("loss", "combination", "targeted", "temperature")}
        key = dict(
            self._combine, batch_size=self.batch_size, eot_iter=self.eot_iter, output=self.output_index
        )
        key.update(devices=backend.batch_multiple(), surrogate=None if surrogate is None else id(surrogate))
        models = self.ensemble.models
        # the variable lists read once (walking the layers costs more than a forward pass on PyTorch); a
        # Keras surrogate's come last, passed as arguments like the members' (JAX would otherwise bake
        # the values of its first call into the compiled step)
        carried = list(models) + ([surrogate] if isinstance(surrogate, keras.Model) else [])
        self._variable_lists = [(m.trainable_variables, m.non_trainable_variables) for m in carried]
        self._seeds, self._draws = _randomness.seed_indices(self._variable_lists), 0
        self._fn = compiled(models, "attack", self._compile_grad, **key)
        self._forward_fn = compiled(models, "attack-forward", self._compile_forward, **key)
        self._key = key

    def _compile_grad(self):
        return backend.compile_grad(self._objective, "x", has_aux=True)

    def _compile_forward(self):
        return backend.compile_forward(self._values)

    def _values(self, *args):
        return self._objective(*args)[1]

    def member_logits(self, trainables, non_trainables, x):
        """Every member's logits `[(n, C)] * K` at backend tensors `x`, inside a compiled step (the
        variable values as `step_function` receives them; FAB reads the decision at its new iterate)."""
        return self._logits(trainables, non_trainables, x)[0]

    def _objective(self, trainables, non_trainables, x, y, weights):
        """The weighted sum of the per-sample objective and `(values, logits)`; with `eot_iter` > 1 the mean
        over that many passes (`_randomness.expectation`) and the last pass's logits (AutoAttack's EOT)."""
        labels, targets = y

        def draw(non_trainables):
            logits, after = self._logits(trainables, non_trainables, x)
            values = _objectives.combine(logits, weights["alpha"], labels, targets, **self._combine)
            return values, keras.ops.stack(logits), after

        values, logits, after = draw(non_trainables)
        if self.eot_iter > 1:  # one traced body (`keras.ops.fori_loop`): a compile of one pass, not 20
            values, logits, _ = _randomness.expectation(draw, values, logits, after, self.eot_iter)
        return keras.ops.sum(values * weights["rows"]), (values, logits)

    def _logits(self, trainables, non_trainables, x):
        """Every member's logits `[(n, C)]` and its non-trainable values after the call; with a
        surrogate, straight-through logits (the member's value, the surrogate's gradient: BPDA)."""
        logits, after = [], []
        sur = None
        if isinstance(self.surrogate, keras.Model):  # its values are the last entry (see __init__)
            sur, state = backend.stateless_call(
                self.surrogate, trainables[-1], non_trainables[-1], x, training=False
            )
            after_surrogate = [state]
        elif self.surrogate is not None:
            sur, after_surrogate = _surrogate.call_surrogate(self.surrogate, x), []
        for k, (model, is_logits) in enumerate(self._forward):
            out, state = backend.stateless_call(model, trainables[k], non_trainables[k], x, **self._kwargs)
            z = _objectives.as_logits(select_output(out, self._keys[k]), is_logits)
            if sur is not None:
                z = _surrogate.straight_through(z, _objectives.as_logits(sur, self._surrogate_is_logits))
            logits.append(z)
            after.append(state)
        return logits, after + (after_surrogate if sur is not None else [])

    @property
    def trace_count(self):
        """Traces (TF, JAX) or input signatures seen (torch) of the objective, with or without gradient."""
        steps = getattr(self._fn, "steps", {}).values()
        return self._fn.trace_count + self._forward_fn.trace_count + sum(s.trace_count for s in steps)

    def step_function(self, name, update, **static):
        """The compiled attack step `call(trainables, non_trainables, state, fixed) -> state` of
        `backend.compile_step` with `update(state, (values, logits), grad, fixed)`, built once per
        `(name, static)` for these members (kept with the compiled gradient: new ensembles of the same
        members reuse it, `trace_count` counts its traces); whole under XLA where `jit_compiled` says."""
        jit = jit_compiled(self.ensemble.models)
        return self._compiled(("step", name, jit), static, backend.compile_step, update, jit_compile=jit)

    def search_function(self, name, propose, keep, draws, **static):
        """`step_function` for a score-based attack (`backend.compile_search`): `propose(state, fixed, u)
        -> candidate` (`u`: `draws` uniform numbers per row), a forward pass, `keep(...)` (the next state)."""
        return self._compiled(("search", name), static, backend.compile_search, propose, keep, draws)

    def _compiled(self, kind, static, build, *args, **options):
        """`build(objective, *args, **options)`, once per `kind` and `static` (kept in `self._fn`)."""
        key = (*kind, tuple(sorted((k, repr(v)) for k, v in static.items())))
        steps = vars(self._fn).setdefault("steps", {})
        if key not in steps:
            steps[key] = build(self._objective, *args, **options)
        return steps[key]

    def _variables(self):
        """The members' current variable values, split as when this objective was built (its compiled
        functions map their arguments to variables by that split)."""
        trainables = [backend.variable_values(t) for t, _ in self._variable_lists]
        non_trainables = [backend.variable_values(n) for _, n in self._variable_lists]
        if any(self._seeds):  # a randomized forward pass: every call draws anew, as `predict` does
            self._draws += 1
            non_trainables = _randomness.advanced(
                self._variable_lists, self._seeds, non_trainables, self._draws
            )
        return trainables, non_trainables

    def fixed(self, labels, targets=None, alphas=None):
        """What a call on these rows fixes besides `x`: `((trainables, non_trainables), parts)`, one part
        `(start, stop, pad, y, weights)` per batch, padded to `padded_size` rows."""
        n, untargeted = len(labels), targets is None
        alpha = backend.to_tensor(np.asarray(self.ensemble.weights if alphas is None else alphas, "float32"))
        parts = []
        for start, stop in batches(n, self.batch_size):
            pad = padded_size(stop - start, self.batch_size)
            yb = take(labels, start, stop, pad)
            tb = yb if untargeted else take(targets, start, stop, pad)
            wb = take(np.ones(n, np.float32), start, stop, pad, True)
            yb, tb, wb = backend.distribute_batch((yb, tb, wb))
            parts.append((start, stop, pad, (yb, tb), {"rows": wb, "alpha": alpha}))
        return self._variables(), parts

    @staticmethod
    def batch_rows(x, start, stop, pad):
        """Rows `start:stop` of `x` (numpy arrays, any structure) padded to `pad` rows, as backend
        tensors sharded on the batch axis under an active `keras.distribution` (JAX)."""
        return backend.distribute_batch((take(x, start, stop, pad),))[0]

    def __call__(self, x, labels, targets=None, alphas=None):
        (trainables, non_trainables), parts = self.fixed(labels, targets, alphas)
        values, logits, grads = [], [], []
        for start, stop, pad, y, weights in parts:
            with backend.out_of_memory_hint(pad or stop - start, "a gradient call"):
                xb = self.batch_rows(x, start, stop, pad)
                (_, (v, z)), g = self._fn(trainables, non_trainables, xb, y, weights)
            rows = stop - start
            values.append(backend.to_numpy(v)[:rows])
            logits.append(backend.to_numpy(z)[:, :rows])
            grads.append(tree.map_structure(lambda a, r=rows: backend.to_numpy(a)[:r], g))
        grad = tree.map_structure(lambda *p: np.concatenate(p).astype(np.float32, copy=False), *grads)
        return np.concatenate(values).astype(np.float64), np.concatenate(logits, axis=1), grad

    def forward(self, x, labels, targets=None, alphas=None):
        """`(values, logits)` as `__call__` returns them, without the gradient (forward passes only)."""
        return self.bind(labels, targets, alphas)(x)

    def bind(self, labels, targets=None, alphas=None):
        """`forward` on rows whose labels (and targets) stay fixed: `bound(x) -> (values, logits)` for
        `x` of `len(labels)` rows. The labels, row weights, ensemble weights and the members' variable
        values are converted once, when binding (the Square Attack queries the same rows thousands of
        times; the model must not change while a bound forward is used)."""
        (trainables, non_trainables), parts = self.fixed(labels, targets, alphas)
        calls = [
            (start, stop, pad, self._forward_fn.bind(trainables, non_trainables, y, weights))
            for start, stop, pad, y, weights in parts
        ]

        def bound(x):
            values, logits = [], []
            for start, stop, pad, fn in calls:
                with backend.out_of_memory_hint(pad or stop - start, "a forward call"):
                    v, z = fn(self.batch_rows(x, start, stop, pad))
                values.append(backend.to_numpy(v)[: stop - start])
                logits.append(backend.to_numpy(z)[:, : stop - start])
            if len(calls) == 1:
                return values[0].astype(np.float64), logits[0]
            return np.concatenate(values).astype(np.float64), np.concatenate(logits, axis=1)

        return bound

    def bind_decision(self, alphas=None):
        """The real decision on the device, for thousands of calls: `(decision, rows)`, where
        `decision(x)` takes backend tensors `x` of exactly `rows` rows (the batch size, padded as
        `fixed` pads it) and returns their decision `(rows,)` int32 as a backend tensor (`decide_tensor`
        on the compiled forward; nothing is read back to the host). The members' variable values are
        read once, when binding. Needs a `batch_size`."""
        if self.batch_size is None:
            raise ValueError("bind_decision() needs an AttackGradient built with a batch_size.")
        (trainables, non_trainables), parts = self.fixed(np.zeros(self.batch_size, np.int32), None, alphas)
        ((_, _, rows, y, weights),) = parts
        fn = compiled(self.ensemble.models, "attack-decision", self._compile_decision, **self._key)
        forward = fn.bind(trainables, non_trainables, y, weights)

        def decision(x):
            with backend.out_of_memory_hint(rows, "a forward call"):
                return forward(x)

        return decision, rows

    def _compile_decision(self):
        """The forward pass and `decide_tensor` in one compiled call (`bind_decision`)."""
        return backend.compile_forward(
            lambda t, n, x, y, w: self.decide_tensor(keras.ops.stack(self._logits(t, n, x)[0]), w["alpha"])
        )

    def decide_tensor(self, logits, alphas):
        """`decide` inside a compiled step: the decision `(n,)` int32 of member logits `(K, n, C)` and the
        weights `alphas` `(K,)`, backend tensors (argmax; the weighted hard vote, ties to the lower id)."""
        ids = keras.ops.argmax(logits, axis=-1)
        if logits.shape[0] == 1:
            return keras.ops.cast(ids[0], "int32")
        classes = keras.ops.arange(logits.shape[-1], dtype=ids.dtype)  # no one_hot: its range check syncs
        votes = keras.ops.cast(keras.ops.expand_dims(ids, -1) == classes, alphas.dtype)
        votes = votes * keras.ops.reshape(alphas, (-1, 1, 1))
        return keras.ops.cast(keras.ops.argmax(keras.ops.sum(votes, axis=0), axis=-1), "int32")

    def decide(self, logits):
        """The real decision `(n,)` int64 from member logits `(K, n, C)`: argmax for one model, the
        weighted hard vote for an ensemble (ties to the lower class id, as `WeightedEnsemble.predict`)."""
        if len(logits) == 1:
            return logits[0].argmax(axis=-1)
        votes = weighted_vote(logits.argmax(axis=-1), self.ensemble.weights, logits.shape[-1])
        return votes.argmax(axis=-1)
