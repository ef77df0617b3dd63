"""`gradkit selftest MODEL DATA --eps E`: the binarization test of an attack on your model and data.

Its parser imports no Keras; `run` loads the model (and a `--surrogate`) and the first `--n` points of
the data, runs `gradkit.selftest`, prints its table and verdict and writes selftest.json to --out.
Exit code 0 on PASS, 1 on FAIL (the attack missed an adversarial example that provably exists, or no
readout separated), 2 on bad input (nothing written), 130 when interrupted.
"""

import os
import sys

from gradkit import _checks, _io, _quiet
from gradkit.cli import _messages
from gradkit.cli._parser import eps_list, number_list, word_list

_EXAMPLE = """examples:
  gradkit selftest model.keras test.npz --eps 8/255 --n 20 --out runs/selftest
  gradkit selftest model.keras digits --eps 0.1 --attack apgd-ce --n-inner 199
  gradkit selftest quantized.keras test.npz --eps 8/255 --surrogate identity.keras

Per point the model's last Dense layer is replaced by a binary readout of its features, trained on
--n-inner points inside 0.95 eps and --n-boundary points at eps: an adversarial example provably
exists, and the attack passes when it finds one on every such model (Zimmermann et al. 2022,
https://arxiv.org/abs/2206.13991). Exit code 0: PASS; 1: FAIL; 2: bad input."""

_FLAGS = {
    "eps": "--eps",
    "norm": "--norm",
    "attack": "--attack",
    "n_inner": "--n-inner",
    "n_boundary": "--n-boundary",
    "eta": "--eta",
    "clip_values": "--clip-values",
    "surrogate": "--surrogate",
    "seed": "--seed",
    "batch_size": "--batch-size",
    "steps": "--steps",
    "n_queries": "--n-queries",
}
_VERSIONS = ("standard", "plus", "rand")
_INTEGERS = {"n": 1, "batch_size": 1, "seed": 0, "steps": 1, "n_queries": 1}


def add_parser(commands):
    """Adds `selftest` to the subparsers `commands`."""
    import argparse

    command = commands.add_parser(
        "selftest",
        help="the binarization test: is the attack strong enough for your model? (exit 0 PASS, 1 FAIL)",
        description="Run gradkit.selftest on the first --n points of DATA; print the table and PASS or "
        "FAIL; write selftest.json to --out.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = command.add_argument
    add("model", metavar="MODEL", help="a .keras file of a classifier ending in a Dense layer")
    add("data", metavar="DATA", help="a .npz (x_test, y_test or x, y) or a study data set name")
    add("--eps", type=eps_list("--eps"), required=True, help="eps > 0 in input units (8/255 allowed)")
    add("--norm", choices=["linf", "l2"], default="linf", help="the threat model (default: linf)")
    add(
        "--attack",
        type=word_list,
        default=["standard"],
        help="AutoAttack's version (standard, plus, rand) or comma-separated attacks (default: standard)",
    )
    add(
        "--n-inner",
        type=int,
        default=999,
        help="inner points per readout, the clean one included (default: 999)",
    )
    add("--n-boundary", type=int, default=1, help="boundary points per readout (default: 1)")
    add("--eta", type=float, default=0.95, help="the inner points' radius over eps (default: 0.95)")
    add("--n", type=int, default=20, help="test the first N points of DATA (default: 20)")
    add("--surrogate", help="a .keras model of the same form for BPDA (the identity for a rounding step)")
    add("--out", default="runs/selftest", help="output directory (default: runs/selftest)")
    add("--clip-values", type=number_list(float), default=[0.0, 1.0], help="input range lo,hi (default: 0,1)")
    add("--batch-size", type=int, default=256, help="rows per compiled call (default: 256)")
    add("--seed", type=int, default=0, help="seed of the sampled points and the attacks (default: 0)")
    add("--steps", type=int, default=100, help="APGD iterations (default: 100)")
    add("--n-queries", type=int, default=5000, help="Square's queries (default: 5000)")
    add("--no-progress", action="store_true", help="no progress bar")
    return command


def _fail(message):
    print(f"gradkit selftest: error: {message}", file=sys.stderr)
    return 2


def _check(args):
    """ValueError naming the flag for a number out of range, several eps or a bad --clip-values."""
    for dest, minimum in _INTEGERS.items():
        _checks.check_int(getattr(args, dest), "--" + dest.replace("_", "-"), minimum=minimum)
    if len(args.eps) != 1:
        raise ValueError(f"`--eps` must be one number. Received: --eps {','.join(map(str, args.eps))}")
    if not args.attack:
        raise ValueError("`--attack` must name a version or attacks. Received: --attack ''")
    if len(args.clip_values) != 2 or not args.clip_values[0] < args.clip_values[1]:
        raise ValueError(
            "`--clip-values` must be lo,hi: the input range, two numbers with lo < hi. Received: "
            f"--clip-values {','.join(f'{v:g}' for v in args.clip_values)}"
        )


def _selftest(args):
    """The `SelfTest` of the parsed `args` (InputError, ValueError or TypeError on bad input)."""
    from gradkit import evaluation
    from gradkit.cli import _inputs

    _check(args)
    x, y, _ = _inputs.load_data(args.data)
    x, y = x[: args.n], y[: args.n]
    _messages.check_data_range(x, args.clip_values)
    model = _inputs.load_model(args.model)
    surrogate = _inputs.load_model(args.surrogate) if args.surrogate else None
    return evaluation.selftest(
        model,
        x,
        y,
        eps=args.eps[0],
        norm=args.norm,
        attack=args.attack[0] if len(args.attack) == 1 and args.attack[0] in _VERSIONS else args.attack,
        n_inner=args.n_inner,
        n_boundary=args.n_boundary,
        eta=args.eta,
        clip_values=tuple(args.clip_values),
        surrogate=surrogate,
        seed=args.seed,
        batch_size=args.batch_size,
        steps=args.steps,
        n_queries=args.n_queries,
        verbose=0 if args.no_progress else 1,
    )


def run(args):
    """Runs `gradkit selftest` with the parsed `args`; returns the exit code (0 PASS, 1 FAIL, 2, 130)."""
    try:
        _quiet.import_keras()
        result = _selftest(args)
    except (ValueError, TypeError) as err:  # the Python layer's parameters named as this command's flags
        return _fail(_messages.as_flags(err, _FLAGS, _messages.EVALUATE_ARGUMENTS))
    except KeyboardInterrupt:
        print("gradkit selftest: interrupted (nothing written)", file=sys.stderr)
        return 130
    print(result.summary())
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "selftest.json")
    info = {"sources": {"model": args.model, "data": args.data, "surrogate": args.surrogate}}
    _io.write_json({**result.to_dict(), **info}, path)
    print(f"wrote {path} ({result.verdict})")
    return 0 if result.passed else 1
