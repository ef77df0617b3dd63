"""Compiled functions cached where they belong: on a Keras model or a `WeightedEnsemble` (`cached`), and
the backend functions themselves on the first member of an ensemble (`compiled`), so that ensembles of
the same members share one compiled function whatever their weights (passed as arguments). An entry is
rebuilt when what it was built from changes under it: a member compiled again, or (`compiled`) layers
frozen or unfrozen.
"""

import keras

from gradkit import _keras_internals
from gradkit.gradients._ensemble import WeightedEnsemble


def split_of(trainable_lists):
    """Which variables are trainable, by identity, from each model's `trainable_variables` list (callers
    that read the lists anyway check a call's split with this, and fetch `compiled` again on a change)."""
    return tuple(tuple(id(v) for v in t) for t in trainable_lists)


def variable_split(models):
    """Which variables of each model are trainable, by identity, in `trainable_variables` order."""
    return split_of(m.trainable_variables for m in models)


def _compile_state(models):
    """The objects each member's last `compile()` left: its `CompileLoss` and its optimizer."""
    return tuple((_keras_internals.compile_loss(m), getattr(m, "optimizer", None)) for m in models)


def _current(entry, state):
    return entry is not None and all(a is b for old, new in zip(entry[1], state) for a, b in zip(old, new))


def cached(owner, kind, factory, **options):
    """`factory()`, built once per `(kind, options)` and kept on `owner` (a Keras model or a
    `WeightedEnsemble`) in its `__dict__`: the cache lives and dies with its owner, never tracked. Built
    again after a member is compiled again (a new loss, loss weights or optimizer): the entry remembers
    each member's `CompileLoss` and optimizer objects and is rebuilt when either is another object."""
    if not isinstance(owner, (keras.Model, WeightedEnsemble)):
        return factory()
    key = (kind, tuple(sorted((k, repr(v)) for k, v in options.items())))
    cache = vars(owner).setdefault("_gradkit_cache", {})
    state = _compile_state(owner.models if isinstance(owner, WeightedEnsemble) else (owner,))
    if not _current(cache.get(key), state):
        cache[key] = (factory(), state)
    return cache[key][0]


def cached_values(owner, kind=None):
    """What `cached` keeps on `owner` for `kind` (None: every kind), oldest first (for tests and
    diagnostics)."""
    entries = vars(owner).get("_gradkit_cache", {}).items()
    return [value for key, (value, _) in entries if kind is None or key[0] == kind]


def compiled(models, kind, build, **options):
    """`build()` (a compiled backend function), built once per `(members, kind, options)` and trainable
    split of the members' variables (`variable_split`: a compiled function maps its variable arguments
    to the model's variables by position, `stateless_call`, so freezing or unfreezing a layer needs
    another), and again after a member is compiled again (as in `cached`).

    Kept in the first member's `__dict__`, keyed by the identity of every member: a new
    `WeightedEnsemble` of the same models, with any weights, reuses it (the entry holds the members, so
    their ids stay theirs while it lives).
    """
    split = variable_split(models)
    key = (kind, tuple(id(m) for m in models), split, tuple(sorted((k, repr(v)) for k, v in options.items())))
    cache = vars(models[0]).setdefault("_gradkit_compiled", {})
    state = _compile_state(models)
    if not _current(cache.get(key), state):
        cache[key] = (build(), state, tuple(models))
    return cache[key][0]
