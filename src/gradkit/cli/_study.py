"""`gradkit study`: its parser (built from `gradkit.study`'s Keras-free defaults) and its run."""

import argparse
import sys

from gradkit import _quiet, study
from gradkit.cli._messages import as_flags, study_flags
from gradkit.cli._parser import csv as _csv
from gradkit.cli._parser import number_list as _number_list
from gradkit.cli._parser import word_list as _word_list
from gradkit.errors import WorseThanRandomError

_EXAMPLE = """examples:
  gradkit study --out runs/demo                     digits, CNN, 4 models, FGSM, PGD, standard (minutes)
  gradkit study --quick --out runs/quick            small and fast (a minute or two)
  gradkit study --norm l2 --attacks pgd,ddn,standard  L2 threat model (eps in L2, input units)
  gradkit study --quick --certify crown-ibp        certified lower bounds below the worst case
  gradkit study --dataset data.npz --model mlp      arrays x_train, y_train, x_test, y_test
  gradkit study --model mynet:build --quick         your network: build(input_shape, n_classes)
  gradkit study --dataset cifar10 --quick           Keras' CIFAR-10 loader (downloads once)

The backend is Keras' (KERAS_BACKEND=tensorflow|jax|torch); the table at the end names it.
A rerun with the same options and --out resumes: finished models and rows are not redone."""


def add_parser(commands):
    """Adds `study` to the subparsers `commands`; defaults of None mean "the study's".

    Builds from `gradkit.study`'s Keras-free names only: no Keras or backend import.
    """
    command = commands.add_parser(
        "study",
        help="train a network, an adversarially trained one, AdaBoost.M1 and adversarial boosting; "
        "attack them; report",
        description="Train `single`, `adv_single`, `adaboost_m1` and `adv_boost`, attack each at every eps, "
        "and write\n"
        "results.json, results.csv, samples.csv, robustness.png, grad_norm.png and the models to --out.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_study_options(command.add_argument, study.DEFAULTS)
    quick, (n_train, n_test) = study.QUICK, study.QUICK_SUBSET
    command.add_argument(
        "--quick",
        action="store_true",
        help=f"{quick['n_estimators']} members x {quick['epochs']} epochs, epsilons "
        + "; ".join(f"{n} {_csv(e)}" for n, e in study.QUICK_EPSILONS.items())
        + f", {quick['apgd_steps']} APGD steps, {quick['square_queries']} "
        f"Square queries, at most {n_train}/{n_test} train/test samples "
        "(explicit options still win)",
    )
    command.add_argument(
        "--devices",
        type=int,
        help="data-parallel over this many devices with keras.distribution.DataParallel (JAX only; "
        "see docs/scaling.md). Default: Keras' default placement",
    )
    command.add_argument("--no-progress", action="store_true", help="no progress bars")
    return command


def _add_study_options(add, defaults):
    """The options that map onto `gradkit.study.make_config`'s keys; their help shows `defaults`."""
    add(
        "--dataset",
        help=f'"digits" (no download), "mnist", "fashion_mnist", "cifar10" (Keras loaders) or a .npz '
        f"file (default: {defaults['dataset']})",
    )
    add(
        "--model",
        help='network of every model: "cnn", "mlp", or "module:function", your function '
        f"(input_shape, n_classes) returning a compiled Keras classifier (default: {defaults['model']})",
    )
    add(
        "--norm",
        type=str.lower,
        choices=study.NORMS,
        help="threat model of every attack, evaluate, the curve and adversarial training (adv_single, "
        "adv_boost; at Linf under l1: gradkit's adversarial training takes Linf and L2) "
        f"(default: {defaults['norm']})",
    )
    add(
        "--epsilons",
        type=_number_list(float),
        help="comma-separated eps >= 0 in the --norm, input units, inputs in [0, 1] (default: "
        + "; ".join(f"{n} {_csv(e)}" for n, e in study.DEFAULT_EPSILONS.items())
        + ")",
    )
    add(
        "--attacks",
        type=_word_list,
        help="comma-separated, from fgsm, pgd, apgd-ce, apgd-t, square, standard (gradkit.evaluate: "
        "AutoAttack's standard version for the --norm), fmn, fab, ddn (l2 only) (one minimum-norm run per "
        "model: every eps, and each point's norm in samples.csv); "
        f"the table leads with the per-sample worst case (default: {_csv(defaults['attacks'])})",
    )
    add("--n-estimators", type=int, help=f"boosting rounds (default: {defaults['n_estimators']})")
    add(
        "--epochs",
        type=int,
        help="epochs per member; single and adv_single get n_estimators x epochs "
        f"(default: {defaults['epochs']})",
    )
    add(
        "--seed",
        type=int,
        help=f"seed of the split, the initial weights and PGD's start (default: {defaults['seed']})",
    )
    add("--batch-size", type=int, help=f"training batch size (default: {defaults['batch_size']})")
    add(
        "--deterministic",
        action="store_true",
        default=None,
        help="the backend's deterministic ops (TensorFlow op determinism, "
        "torch.use_deterministic_algorithms; JAX is deterministic on CPU and warns on a GPU without "
        "XLA_FLAGS=--xla_gpu_deterministic_ops=true): a rerun with the same --seed on the same machine "
        "and backend gives identical results",
    )
    add(
        "--pgd-steps",
        type=int,
        help=f"PGD steps, eps_step = 2.5 eps / steps (default: {defaults['pgd_steps']})",
    )
    _add_attack_options(add, defaults)
    add(
        "--certify",
        choices=["ibp", "crown-ibp", "crown"],
        help="also certify every model at every eps (linf, l2) by bound propagation (boosted models: "
        "their vote, from the members' certificates): a certified row below the worst case (a lower "
        "bound), the check certified <= worst case per point, the lower edge of the band in "
        "robustness.png; a rerun may add, change or drop it, nothing else is redone (default: none)",
    )
    add("--out", help=f"output directory (default: {defaults['out']})")


def _add_attack_options(add, defaults):
    """The options of the attacks, of adversarial training (`adv_single`) and of adversarial boosting."""
    add(
        "--apgd-steps",
        type=int,
        help=f"APGD steps (apgd-ce, apgd-t, standard) (default: {defaults['apgd_steps']})",
    )
    add(
        "--square-queries",
        type=int,
        help=f"Square queries (square, standard) (default: {defaults['square_queries']})",
    )
    add(
        "--adv-attack",
        choices=["pgd", "fgsm"],
        help=f"attack of adversarial training and boosting (fgsm: with a random start) "
        f"(default: {defaults['adv_attack']})",
    )
    both = "adversarial training and boosting"
    adv_eps = "; ".join(f"{n} {e:g}" for n, e in study.DEFAULT_ADV_EPS.items())
    add("--adv-eps", type=float, help=f"eps of {both}, in its norm (default: {adv_eps} (Linf))")
    add("--adv-steps", type=int, help=f"PGD steps of {both} (default: {defaults['adv_steps']})")
    add(
        "--adv-mode",
        choices=["augment", "fit"],
        help="how adv_boost trains a round: augment (clean + adversarial copies made between rounds) or "
        f"fit (each member with gradkit.adversarial_training) (default: {defaults['adv_mode']})",
    )


def use_devices(n):
    """Turns on `keras.distribution.DataParallel` over the first `n` devices (JAX backend only).

    Raises:
        ValueError: n < 1, more devices than exist, or a backend without keras.distribution support.
    """
    import keras

    from gradkit import backend

    if n < 1:
        raise ValueError(f"--devices must be >= 1. Received: {n}")
    if not backend.DATA_PARALLEL:
        raise ValueError(
            "--devices needs the JAX backend: gradkit shards work with keras.distribution, which "
            f"Keras supports on JAX only. Received: KERAS_BACKEND={keras.backend.backend()}"
        )
    devices = keras.distribution.list_devices()
    if n > len(devices):
        raise ValueError(f"--devices {n} asks for more devices than exist ({len(devices)}: {devices}).")
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:n]))


def run(args):
    """Runs `gradkit study` with the parsed `args`; returns the exit code (see `gradkit.cli.main`)."""
    options = {k: v for k, v in vars(args).items() if k not in ("command", "no_progress", "devices")}
    _quiet.import_keras()  # without TensorFlow's C++ start-up lines
    try:
        if args.devices is not None:
            use_devices(args.devices)
    except ValueError as err:
        print(f"gradkit study: error: {err}", file=sys.stderr)
        return 2
    try:
        result = study.run_study(options, progress=not args.no_progress, log=_tell)
    except (study.ConfigError, study.DatasetError) as err:  # the options' keys named as the flags
        print(f"gradkit study: error: {as_flags(err, study_flags(study.DEFAULTS))}", file=sys.stderr)
        return 2
    except WorseThanRandomError as err:  # a training that cannot succeed with these settings
        print(f"gradkit study: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gradkit study: interrupted; rerun the same command to resume.", file=sys.stderr)
        return 130
    print(study.format_table(result, out=args.out or study.DEFAULTS["out"]))
    return 0


def _tell(message):
    print(f"gradkit study: {message}", file=sys.stderr)
