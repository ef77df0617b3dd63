"""The parser of `gradkit evaluate` (no Keras imported): its flags, their types and its examples."""

from gradkit.cli._parser import eps_list, mean_std, number_list, word_list

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
