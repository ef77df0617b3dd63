"""`gradkit evaluate MODEL DATA --eps E`: the standard evaluation of your model on your data.

Its parser imports no Keras; `run` loads the model and the data, checks them against each other before any
work (exit 2, nothing written), runs `gradkit.evaluation.evaluate_shard` at every eps (each on the points
the smaller ones left robust), prints the table and writes evaluation.json and samples.csv to --out.
The state is saved after each block of each attack (in OUT/state, or --state), so rerunning an
interrupted command resumes at the next unfinished block and says what it reused.
"""

import os
import sys

import numpy as np

from gradkit import _quiet
from gradkit.cli import _messages, _resume, _torch_module
from gradkit.errors import StateMismatchError

_LAUNCHED = {"WORLD_SIZE", "JAX_NUM_PROCESSES"}  # set by torchrun, or by you for jax.distributed


def _fail(message):
    print(f"gradkit evaluate: error: {message}", file=sys.stderr)
    return 2


def _prepare(args, inputs):
    """`(model, x, y, options)` checked to be usable; InputError/ValueError/TypeError otherwise."""
    from gradkit import attacks, evaluation
    from gradkit.cli import _images

    _messages.check_evaluate(args)  # the numbers, in the flags' terms
    if args.n_classes is not None and not (args.model_fn or args.torch_module):
        raise ValueError(
            "`--n-classes` is for --model-fn only (and --torch-module): a saved model knows its classes"
        )
    _messages.check_attacks(args.attacks, attacks.NAMES)
    clip = inputs.load_clip_values(args.clip_values)
    if os.path.isdir(args.data):  # images in class sub-folders: a stream, checked block by block
        x, y = _images.image_folder(args.data, args.image_size, args.batch_size, args.n_points), None
        n_classes, input_shape = args.n_classes or len(x.class_names), x.input_shape
    else:
        x, y, _ = inputs.load_data(args.data)
        n_classes = args.n_classes or inputs.classes_in(y)  # all of DATA's labels, not the first N points'
        cut = slice(None, args.n_points)
        x, y = ({k: a[cut] for k, a in x.items()} if isinstance(x, dict) else x[cut]), y[cut]
        if not isinstance(x, dict) and not np.ndim(clip[0]):
            _messages.check_data_range(x, clip)
        input_shape = None if isinstance(x, dict) else x.shape[1:]
    shapes = {"input_shape": input_shape, "n_classes": n_classes, "torch_module": args.torch_module}
    model = inputs.load_model(args.model, args.model_fn, **shapes)
    options = {
        "epsilons": sorted(set(args.eps)),
        "norm": args.norm,
        "attacks": args.attacks or args.suite,
        "clip_values": clip,
        "mask": inputs.load_mask(args.mask),
        "attack_inputs": args.attack_inputs,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "steps": args.steps,
        "n_queries": args.n_queries,
        "verbose": 0 if args.no_progress else 1,
        "eot_iter": args.eot_iter,
        "certify": args.certify,
        "preprocessing": _preprocessing(args.preprocess, x, args.torch_module),
    }
    if args.check_convergence:  # only when set: the options of other evaluations stay as they were
        options["check_convergence"] = True
    if y is None and (args.shard is not None or _LAUNCHED & set(os.environ)):
        raise ValueError(
            "`--shard` and process groups need DATA in memory (a .npz or a data set name): a folder of "
            "images is evaluated in one process"
        )
    if args.shard is not None:
        k, n = args.shard
        if not 1 <= k <= n:
            raise ValueError(f"`--shard` must be K/N with 1 <= K <= N. Received: {k}/{n}")
        options["rows"] = evaluation.shard_rows(len(y), k - 1, n, args.batch_size, name="--shard")
    return model, x, y, options


def _preprocessing(values, x, torch_module):
    """`(mean, std)` float32 arrays of `--preprocess`, one value per channel on the last axis of DATA's
    inputs, or for images of a `--torch-module` (channels first) on the axis after the batch; None."""
    if values is None:
        return None
    import numpy as np

    mean, std = (np.asarray(v, np.float32) for v in values)
    if torch_module and x.ndim == 4:
        mean, std = (a.reshape(-1, 1, 1) for a in (mean, std))
    return mean, std


def _join(args):
    """Joins the launcher's process group; with `--mesh`, sets one DataParallel mesh over all its devices."""
    from gradkit import backend

    if args.shard is None and _LAUNCHED & set(os.environ):
        backend.start_processes()  # JAX must join before any device work (even Keras' first op)
    _quiet.import_keras()
    if not args.mesh:
        return
    import keras

    if not backend.DATA_PARALLEL or backend.processes() is None:
        given = "--shard" if args.shard else f"processes={backend.processes()}"
        raise ValueError(
            "`--mesh` needs the jax backend in a jax.distributed group (JAX_COORDINATOR_ADDRESS, "
            "JAX_NUM_PROCESSES, JAX_PROCESS_ID; no --shard). "
            f"Received: KERAS_BACKEND={keras.backend.backend()}, {given}"
        )
    devices = keras.distribution.list_devices()  # every process's, in the same order on each
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    backend.set_random_seed(args.seed)  # the same initial values on every process (JAX checks them)


def _evaluate(model, x, y, options, args):
    """`(shard, rank)`: one `--shard`, or all points across the launcher's processes (or this one)."""
    from gradkit import evaluation

    path = _resume.state_path(args)
    if y is None:  # a folder of images, block by block
        return evaluation.evaluate_stream_shard(model, x, None, state_path=path, **options), 0
    if args.shard is not None:
        return evaluation.evaluate_shard(model, x, y, state_path=path, **options), 0
    shard, rank, _ = evaluation.evaluate_processes(model, x, y, state_path=path, **options)
    return shard, rank


def run(args):
    """Runs `gradkit evaluate` with the parsed `args`; returns the exit code (0, 2 or 130).

    Under `torchrun` (or with `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID` on JAX)
    each process evaluates its part of the points (with `--mesh`, JAX: all processes run every call
    together on one mesh over their devices) and rank 0 alone prints and writes.
    """
    launcher = _messages.launcher_error()  # before Keras is imported: one line, not a dump per process
    if launcher:
        return _fail(launcher) if os.environ.get("RANK", "0") == "0" else 2
    if problem := _torch_module.problem(args):  # before any import of Keras or torch
        return _fail(problem)
    try:
        _join(args)  # before the model is loaded: under --mesh its variables live on the mesh
        from gradkit import evaluation
        from gradkit.cli import _inputs

        model, x, y, options = _prepare(args, _inputs)
        shard, rank = _evaluate(model, x, y, options, args)
    except StateMismatchError as err:
        return _fail(_resume.mismatch(err, args))
    except (ValueError, TypeError) as err:  # the Python layer's parameters named as this command's flags
        return _fail(_messages.as_flags(err, _messages.EVALUATE, _messages.EVALUATE_ARGUMENTS))
    except KeyboardInterrupt:
        print(_resume.interrupted(args), file=sys.stderr)
        return 130
    if rank:
        return 0
    if _resume.resumed(shard, args):
        print(_resume.resumed(shard, args), file=sys.stderr)
    info = {"versions": _inputs.versions(), "sources": {"model": args.model, "data": args.data}}
    if args.torch_module:
        info["sources"]["torch_module"] = args.torch_module
    if args.shard is not None:
        info["shard"] = f"{args.shard[0]}/{args.shard[1]}"
    report = evaluation.write_report(shard, args.out, info=info)
    for ev in shard.evaluations():
        print(ev.summary())
    print(
        f"wrote {args.out}/evaluation.json and samples.csv (robust accuracy {report['robust_accuracy']:.4f})"
    )
    return 0
