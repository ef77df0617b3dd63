"""What the command-line tests share: running `gradkit evaluate` in-process and reading samples.csv."""

import csv

from gradkit import cli


def run_evaluate(capsys, *args):
    """`(exit code, captured output)` of `gradkit evaluate *args`."""
    code = cli.main(["evaluate", *args])
    return code, capsys.readouterr()


def samples(out):
    """The rows of `out`/samples.csv as dicts of strings."""
    with open(out / "samples.csv", newline="") as f:
        return list(csv.DictReader(f))
