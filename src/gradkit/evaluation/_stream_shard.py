"""`evaluate_shard` of a stream (`gradkit evaluate` on a folder of images): the `Shard` of all its points
at several eps, block by block (`_streaming`), each eps on the points the smaller ones left robust."""

import keras
import numpy as np

from gradkit.evaluation import _cascade, _shards, _state, _streaming
from gradkit.gradients import preprocessed


def evaluate_stream_shard(model, source, y=None, *, epsilons, state_path=None, **options):
    """`evaluate_shard` of data that does not fit in memory: the `Shard` of all the points of `source`
    at every eps, one block of `batch_size` points at a time (what `gradkit evaluate` runs on a folder
    of images), equal point for point to `evaluate_shard` on the concatenated arrays.

    Args:
        model: as for `evaluate_shard`.
        source: a source of `(x, y)` batches or a memory-mapped array, as `gradkit.evaluate`'s `x`.
        y: None, or the labels `(n,)` of a memory-mapped `source`.
        epsilons: float >= 0 or a strictly increasing list of them.
        state_path: None or a JSON path: the state is saved there after each block (all eps), and a
            rerun reads the stream again and resumes at its first unfinished block.
        **options: `evaluate_shard`'s `norm`, `version`, `attacks`, `eot_iter`, `clip_values`,
            `batch_size` (required: the points of each block), `seed`, `n_queries`, `steps`, `verbose`,
            `certify`, `check_convergence`, `preprocessing` (a callable takes rows of the model's
            input shape).

    Returns:
        A `Shard` over all the points (its states' `x_adv` None; `resumed` names the blocks read back).

    Raises:
        ValueError, TypeError: as `evaluate_shard`, and for a missing `batch_size`, `y` given with a
            source of batches, or batches that are not `(x, y)` pairs; a block's data is checked
            when it is read. `gradkit.errors.StateMismatchError`: a state file of another evaluation.

    References:
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
    """
    epsilons = _shards._epsilons(epsilons)
    suite = _streaming.Suite(
        _cascade.cascade,
        _cascade.certified_of,
        _cascade.shares_of,
        _cascade.weights,
        _cascade._randomness,
        _cascade._PROBE,
    )
    options = {"version": None, "eot_iter": 20, "surrogate": None, **options}
    model = preprocessed(model, options.pop("preprocessing", None))  # rows of the model's input shape
    if options.pop("attack_inputs", None) is not None:
        raise ValueError("`--attack-inputs` needs DATA in memory (an .npz): a folder of images is one input")
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
