"""The `gradkit` command line: `gradkit evaluate` (your model on your data), `gradkit study`, `gradkit merge`,
`gradkit selftest` (the binarization test of an attack on your model).

`gradkit <command> --help` lists a command's options; a negative number needs no "=" (`--clip-values
-4,14`). The parsers are built from Keras-free names (`gradkit.study`'s `DEFAULTS` and `QUICK`), so
`--help`, `--version` and bad options answer without importing Keras or a backend; Keras is imported only
when a command runs.

Exit codes: 0 success, 2 bad input (no command, unknown data set, malformed epsilons, unusable output
directory, a changed configuration in an existing one, a model or data that do not match, shards that do
not belong together, torchrun without KERAS_BACKEND=torch; the message names the flags to change, goes to
stderr, and nothing is written), 1 a study model that cannot be trained or a `selftest` that says FAIL,
130 interrupted (rerun the same command to resume).
"""

from gradkit.cli._main import build_parser
from gradkit.cli._main import main
from gradkit.cli._study import use_devices

__all__ = [
    "build_parser",
    "main",
    "use_devices",
]
