"""The per-point cascade `evaluate` and the shards run: a model of several inputs made one flat row, the
clean state (with the probe for a randomized forward pass), the attacks in order with their saves, and
the certified points, ensemble weights and member shares beside them."""

import time

import keras
import numpy as np

from gradkit import attacks as registry
from gradkit.evaluation import _certified, _convergence, _state
from gradkit.evaluation._entry_run import fooled, run_entry
from gradkit.gradients import as_ensemble, member_gradient_norms, predict_batched

_PROBE = 32  # rows predicted twice to detect a randomized forward pass


def flat_inputs(model, x, attack_inputs, clip_values, mask):
    """`(flat, model, x, clip_values, mask)`: for a model of several inputs given as a list or dict `x`,
    its `gradkit.attacks.FlatInputs` and the flat problem; else None and the arguments as given."""
    if registry.is_several(model, x):
        flat = registry.FlatInputs(model, x, attack_inputs=attack_inputs, clip_values=clip_values, mask=mask)
        return flat, flat.model, flat.x, flat.clip_values, flat.mask
    if attack_inputs is not None:
        raise ValueError(
            "`attack_inputs` names inputs of a model of several inputs, given as a list or dict `x`. "
            f"Received: attack_inputs={attack_inputs!r} with x of type {type(x).__name__}"
        )
    return None, model, x, clip_values, mask


def cascade(
    model, x, labels, config, state, *, state_path=None, fp=None, first_block=0, start=None, tasks=None
):
    """Runs every unfinished attack of `config` on `state` (in place), saving it after each block and
    each attack when `state_path` is set (`_state.save_block`, `_state.save`), from the next block of a
    half-done attack; `first_block` numbers the first block of `x` (see `run_entry`); `start`: the
    `time.perf_counter()` its time counts from (default: now); `tasks`: as for `run_entry` (then nothing
    is saved once another process has taken one of this one's blocks, until `Tasks.finish`)."""
    start, seconds = start or time.perf_counter(), state.seconds

    def save(rows=None):
        state.seconds = seconds + time.perf_counter() - start
        if not state_path or (tasks is not None and tasks.stolen):
            return
        if rows is None:
            _state.save(state_path, fp, state)
        else:
            _state.save_block(state_path, fp, state, rows)

    for entry in _convergence.entries(config):
        if entry.name in state.finished:
            continue
        run_entry(model, x, labels, entry, config, state, first_block, tasks, save=save)
        save()
    state.seconds = seconds + time.perf_counter() - start
    return state


def certified_of(model, x, labels, config):
    """bool `(n,)`: the points certified at `config.eps` by `config.certify`'s bounds, or None."""
    if config.certify is None:
        return None
    return _certified.certified_points(
        model,
        x,
        labels,
        method=config.certify,
        eps=config.eps,
        norm=config.norm,
        clip_values=config.box or config.clip_values,
        batch_size=config.batch_size,
        mask=config.mask,
    )


def weights(model):
    """The ensemble weights of an ensemble or boosted model (floats), else ()."""
    return tuple(float(w) for w in as_ensemble(model).weights) if registry.is_ensemble(model) else ()


def shares_of(model, x, labels, config):
    """alpha_k * ||grad_x CE_k||_2 `(K, n)` of an ensemble's members at the clean points, else None."""
    return member_gradient_norms(model, x, labels, config.batch_size) if registry.is_ensemble(model) else None


def _randomness(model, x, batch_size):
    """Max |difference| between two predictions of the first rows, over the members; 0.0 if none."""
    rows, worst = x[:_PROBE], 0.0
    for member in as_ensemble(model).models:
        first, second = (predict_batched(member, rows, batch_size or 256) for _ in range(2))
        for a, b in zip(keras.tree.flatten(first), keras.tree.flatten(second)):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
                worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


def clean(model, x, labels, config, prediction=None):
    """The state before any attack: the randomness probe and the clean decisions (`prediction`, computed
    if None: on a randomized model by the majority of `eot_iter` draws)."""
    probe = 2 * min(len(x), _PROBE) * len(as_ensemble(model).models)
    state = _state.State(
        robust=np.zeros(len(x), bool),
        broken_by=[],
        x_adv=x.copy(),
        zero_gradient=np.zeros(len(x), bool),
        clean_accuracy=0.0,
        randomized=_randomness(model, x, config.batch_size),
        n_forwards=probe,
    )
    if prediction is None:  # on a randomized model, the majority of `eot_iter` draws (`fooled`)
        state.robust = ~fooled(model, x, labels, config, state)
    else:
        state.robust, state.n_forwards = np.asarray(prediction) == labels, probe + len(x)
    state.broken_by = [None if r else "clean" for r in state.robust]
    state.clean_accuracy = float(state.robust.mean())
    return state
