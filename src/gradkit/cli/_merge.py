"""`gradkit merge DIR... --out DIR`: the outputs of one evaluation from the folders of its shards.

It reads each folder's shard.json (written by `gradkit evaluate --shard K/N`), checks that they hold the
same model, data and settings and cover every point exactly once (exit 2 naming what differs, nothing
written), and writes evaluation.json and samples.csv as one run over all points would.
"""

import os
import sys

from gradkit import _io, _quiet

_EXAMPLE = """example:
  gradkit evaluate model.keras test.npz --eps 0.1 --shard 1/2 --out runs/part1
  gradkit evaluate model.keras test.npz --eps 0.1 --shard 2/2 --out runs/part2
  gradkit merge runs/part1 runs/part2 --out runs/all"""


def add_parser(commands):
    """Adds `merge` to the subparsers `commands`."""
    import argparse

    command = commands.add_parser(
        "merge",
        help="combine the folders of `gradkit evaluate --shard K/N` runs into one evaluation",
        description="Check that the shards belong together and write evaluation.json and samples.csv.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("folders", metavar="DIR", nargs="+", help="the --out folders of the shards")
    command.add_argument("--out", required=True, help="output directory")
    return command


def run(args):
    """Runs `gradkit merge` with the parsed `args`; returns the exit code (0 or 2)."""
    _quiet.import_keras()
    from gradkit import evaluation

    try:
        shards = [evaluation.read_shard(folder) for folder in args.folders]
        merged = evaluation.merge_shards(shards, names=args.folders)
    except ValueError as err:
        print(f"gradkit merge: error: {err}", file=sys.stderr)
        return 2
    first = _io.read_json(os.path.join(args.folders[0], "evaluation.json")) or {}
    info = {k: first[k] for k in ("versions", "sources") if k in first}
    info["merged_from"] = list(args.folders)
    report = evaluation.write_report(merged, args.out, info=info)
    for ev in merged.evaluations():
        print(ev.summary())
    print(
        f"wrote {args.out}/evaluation.json and samples.csv (robust accuracy {report['robust_accuracy']:.4f})"
    )
    return 0
