"""`gradkit`'s top-level parser and `main`: one subcommand per module (`_study`, `_evaluate`, `_merge`,
`_selftest`)."""

import sys

from gradkit import __version__
from gradkit.cli import _evaluate, _evaluate_args, _merge, _selftest, _study
from gradkit.cli._parser import Parser, UsageError

_RUN = {"study": _study.run, "evaluate": _evaluate.run, "merge": _merge.run, "selftest": _selftest.run}


def build_parser():
    """The argparse parser of `gradkit` (subcommands `evaluate`, `study`, `merge`, `selftest`).

    Built from Keras-free names only: `gradkit --help` and `gradkit <command> --help` import no backend.
    """
    parser = Parser(
        prog="gradkit",
        description="Robustness evaluations and studies of Keras networks and boosted ensembles.",
    )
    parser.add_argument("--version", action="version", version=f"gradkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _evaluate_args.add_parser(commands)
    _study.add_parser(commands)
    _merge.add_parser(commands)
    _selftest.add_parser(commands)
    return parser


def main(argv=None):
    """Runs `gradkit` with the arguments `argv` (default: `sys.argv[1:]`) and returns the exit code.

    Args:
        argv: list of str, e.g. `["study", "--quick", "--out", "runs/q"]`. Defaults to None.

    Returns:
        int: 0 on success (and for `--help`, `--version`; `selftest`: PASS), 2 on bad input (usage and
        message on stderr, nothing written), 1 when a boosted model cannot be trained with these
        settings (its first learner is worse than random; message on stderr, the models finished
        before it kept) and when `selftest` says FAIL, 130 when interrupted.
    """
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    except SystemExit as exit_:  # --help, --version
        return int(exit_.code or 0)
    return _RUN[args.command](args)
