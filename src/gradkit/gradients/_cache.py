"""Compiled functions cached on the object they belong to (a Keras model or a `WeightedEnsemble`)."""

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
