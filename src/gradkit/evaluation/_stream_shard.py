"""`evaluate_shard` of a stream (`gradkit evaluate` on a folder of images): the `Shard` of all its points
at several eps, block by block (`_streaming`), each eps on the points the smaller ones left robust."""

import keras
import numpy as np

from gradkit.evaluation import _shards, _state, _streaming, _suite


def stream_shard(model, source, y=None, *, epsilons, state_path=None, **options):
    """`_shards.evaluate_shard(model, source, y, epsilons=..., ...)` on a stream `source` (`_sources`):
    the same `Shard` as on the concatenated arrays (`x_adv` None, `resumed` naming the blocks read back
    from `state_path`). `options`: `evaluate_shard`'s, `batch_size` required (the block size)."""
    epsilons = _shards._epsilons(epsilons)
    suite = _streaming.Suite(
        _suite.cascade,
        _suite.certified_of,
        _suite.shares_of,
        _suite.weights,
        _suite._randomness,
        _suite._PROBE,
    )
    options = {"version": None, "eot_iter": 20, "surrogate": None, **options}
    done = _streaming.run(
        model,
        source,
        y,
        suite=suite,
        state_path=state_path,
        epsilons=epsilons,
        judge_by_prediction=True,
        **options,
    )
    config, labels = done.config, done.labels
    settings = _shards._settings(model, np.zeros((0, *done.shape), done.dtype), labels[:0], config, epsilons)
    settings.update(x=done.x_digest, y=_state.digest(labels), n_total=len(labels))
    settings["backend"] = keras.backend.backend()
    resumed = [(eps, f"{done.resumed} blocks of the stream done") for eps in epsilons] if done.resumed else []
    return _shards.Shard(
        settings,
        0,
        len(labels),
        labels,
        done.prediction,
        done.states,
        suite.weights(model),
        done.shares,
        resumed,
    )
