"""Compiled functions cached where they belong: on a Keras model or a `WeightedEnsemble` (`cached`), and
the backend functions themselves on the first member of an ensemble (`compiled`), so that ensembles of
the same members share one compiled function whatever their weights (passed as arguments)."""

import keras

from gradkit.gradients._ensemble import WeightedEnsemble


def cached(owner, kind, factory, **options):
    """`factory()`, built once per `(kind, options)` and kept on `owner` (a Keras model or a
    `WeightedEnsemble`) in its `__dict__`: the cache lives and dies with its owner, never tracked."""
    if not isinstance(owner, (keras.Model, WeightedEnsemble)):
        return factory()
    key = (kind, tuple(sorted((k, repr(v)) for k, v in options.items())))
    cache = vars(owner).setdefault("_gradkit_cache", {})
    if key not in cache:
        cache[key] = factory()
    return cache[key]


def compiled(models, kind, build, **options):
    """`build()` (a compiled backend function), built once per `(members, kind, options)`.

    Kept in the first member's `__dict__`, keyed by the identity of every member: a new
    `WeightedEnsemble` of the same models, with any weights, reuses it (the entry holds the members, so
    their ids stay theirs while it lives).
    """
    key = (kind, tuple(id(m) for m in models), tuple(sorted((k, repr(v)) for k, v in options.items())))
    cache = vars(models[0]).setdefault("_gradkit_compiled", {})
    if key not in cache:
        cache[key] = (build(), tuple(models))
    return cache[key][0]
