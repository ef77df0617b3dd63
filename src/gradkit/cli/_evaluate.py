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
from gradkit.cli._parser import eps_list, mean_std, number_list, word_list
from gradkit.errors import StateMismatchError

_EXAMPLE = """examples:
  gradkit evaluate runs/demo/single.keras digits --eps 0.1 --out runs/eval
  gradkit evaluate runs/demo/adv_boost digits --eps 0.05,0.1 --n-points 200
  gradkit evaluate model.weights.h5 test.npz --model-fn mynet:build --eps 8/255 --out runs/mine
  KERAS_BACKEND=torch gradkit evaluate net.pt test.npz --torch-module mynet:build --eps 8/255
  gradkit evaluate model.keras test.npz --eps 0.1 --shard 1/2 --out runs/part1   (then gradkit merge)
  gradkit evaluate model.keras images/ --image-size 32,32 --clip-values 0,255 --eps 8 --out runs/imgs

DATA is a .npz with x_test, y_test (or x, y), a study data set name (digits, mnist, fashion_mnist,
cifar10: the test split gradkit study uses), or a folder of class sub-folders of images (the layout of
keras.utils.image_dataset_from_directory; class ids from the sub-folders' sorted names), read one block
of --batch-size images at a time. --model-fn's function takes no argument or
(input_shape, n_classes) and returns the Keras model whose weights MODEL holds; --torch-module's
returns the torch.nn.Module whose state_dict MODEL (.pt/.pth) holds ("-": the module's own weights),
run on KERAS_BACKEND=torch with DATA laid out as the module reads it (images channels first)."""


def _shard(text):
    k, slash, n = text.partition("/")
    if not slash or not k.strip().isdigit() or not n.strip().isdigit():
        raise ValueError(text)
    return int(k), int(n)


_LAUNCHED = {"WORLD_SIZE", "JAX_NUM_PROCESSES"}  # set by torchrun, or by you for jax.distributed
_shard.__name__ = "K/N"


def add_parser(commands):
    """Adds `evaluate` to the subparsers `commands`."""
    import argparse

    command = commands.add_parser(
        "evaluate",
        help="the standard robustness evaluation (AutoAttack's cascade) of your model on your data",
        description="Run gradkit.evaluate on MODEL and DATA at each eps; print the table; write "
        "evaluation.json and samples.csv to --out.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = command.add_argument
    add(
        "model",
        metavar="MODEL",
        help="a .keras file, a saved boosted model folder, weights (--model-fn) or a state_dict "
        "(--torch-module)",
    )
    add(
        "data",
        metavar="DATA",
        help="a .npz (x_test, y_test or x, y), a study data set name, or a folder of class sub-folders of "
        "images (read a batch at a time; --image-size)",
    )
    add(
        "--eps",
        type=eps_list("--eps"),
        required=True,
        help="comma-separated eps >= 0 in input units (8/255 allowed)",
    )
    add("--norm", choices=["linf", "l2", "l1"], default="linf", help="the threat model (default: linf)")
    add(
        "--version",
        dest="suite",
        choices=["standard", "plus", "rand", "malt"],
        default="standard",
        help="AutoAttack's version: standard (APGD-CE, APGD-T, FAB-T, Square), plus, rand (EOT); or malt "
        "(APGD-CE, APGD-T towards MALT's targets, Square)",
    )
    add(
        "--certify",
        choices=["ibp", "crown-ibp", "crown"],
        help="also certify every point (Linf, L2) by bound propagation: a certified accuracy beside the "
        "robust one, a certified column in samples.csv (default: none)",
    )
    add(
        "--check-convergence",
        action="store_true",
        help="rerun the attacks on the points left robust with twice the steps and restarts (a point "
        "that falls counts as broken; flag not_converged) and flag still_improving losses",
    )
    add("--eot-iter", type=int, default=20, help="rand: gradients averaged per step (default: 20)")
    add("--attacks", type=word_list, help="comma-separated attacks instead of the version's (apgd-ce, ...)")
    add("--n-points", type=int, help="evaluate the first N points only (default: all)")
    add(
        "--image-size",
        type=number_list(int),
        help="H,W: DATA a folder of images, each resized to H,W (RGB, values in [0, 255]: "
        "--clip-values 0,255 unless the model rescales)",
    )
    add("--out", default="runs/evaluate", help="output directory (default: runs/evaluate)")
    add(
        "--state",
        help="the state file (JSON; one per eps when several), saved after each block of each attack "
        "(default: OUT/state/evaluation.json): rerun the same command to resume",
    )
    add(
        "--batch-size", type=int, default=256, help="rows per compiled call and per seed block (default: 256)"
    )
    add("--seed", type=int, default=0, help="seed of the random starts and searches (default: 0)")
    add("--steps", type=int, default=100, help="APGD iterations (default: 100)")
    add("--n-queries", type=int, default=5000, help="Square's queries (default: 5000)")
    add(
        "--clip-values",
        type=_clip_values,
        default=[0.0, 1.0],
        help="input range lo,hi (default: 0,1), or per-feature bounds lo.npy,hi.npy or a .npz of lo and hi",
    )
    add(
        "--preprocess",
        type=mean_std("--preprocess"),
        metavar="MEAN/STD",
        help="the model sees (x - mean) / std while eps and --clip-values stay in DATA's units (pixels): "
        "MEAN/STD, each a number or one per channel (the last axis; images of --torch-module: the "
        "first), e.g. 0.485,0.456,0.406/0.229,0.224,0.225 (default: none)",
    )
    add("--mask", help="a .npy of 0/1 (1: the feature may change), or a .npz of one mask per input name")
    add(
        "--attack-inputs",
        type=lambda text: [name.strip() for name in text.split(",")],
        help="a model of several inputs (DATA: one array per input name): the inputs attacked (default: all)",
    )
    add("--model-fn", help="module:function building the model whose weights MODEL holds")
    add(
        "--torch-module",
        help="module:function building the torch.nn.Module whose state_dict MODEL (.pt/.pth) holds "
        "(KERAS_BACKEND=torch)",
    )
    add(
        "--n-classes",
        type=int,
        help="--model-fn, --torch-module: the classes the function builds for (default: the largest "
        "label in DATA + 1)",
    )
    add(
        "--shard",
        type=_shard,
        help="K/N: evaluate only the K-th of N contiguous parts (merge with gradkit merge)",
    )
    add(
        "--mesh",
        action="store_true",
        help="JAX under jax.distributed: one keras.distribution DataParallel mesh over every process's "
        "devices (instead of one contiguous part of the points per process)",
    )
    add("--no-progress", action="store_true", help="no progress bars")
    return command


def _clip_values(text):
    """`--clip-values`' type: "lo,hi" as two floats, or the file names of per-feature bounds
    ("lo.npy,hi.npy" or "box.npz"), kept as given (read by `cli._inputs.load_clip_values`)."""
    return text if text.lower().endswith((".npy", ".npz")) else number_list(float)(text)


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
