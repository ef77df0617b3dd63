"""Attacks on Keras classifiers, weighted ensembles and boosted models: one module per attack family.

| module        | attacks                          | kind                        | norms            |
|---------------|----------------------------------|-----------------------------|------------------|
| `pgd.py`      | `fgsm`, `bim`, `pgd`             | at eps, gradient            | Linf, L2, L1     |
| `apgd.py`     | `apgd` (CE, DLR, APGD-T, APGD-L1)| at eps, gradient            | Linf, L2, L1     |
| `square.py`   | `square`                         | at eps, scores only         | Linf, L2, L1     |
| `fab.py`      | `fab` (FAB, FAB-T)               | minimum-norm, or at eps     | Linf, L2, L1     |
| `fmn.py`      | `fmn`                            | minimum-norm                | L0, L1, L2, Linf |
| `ddn.py`      | `ddn`                            | minimum-norm                | L2               |

Each attack module reads top to bottom: the paper's algorithm in its docstring, the public function,
the step's `update` in `keras.ops`, its schedules and starts. What they share: `geometry.py` (norms,
directions, projections, starts), `_frame.py` (the model normalised once, the checked batch, the
recorder of success and costs), `_engine.py` (the state dict advanced by one compiled step),
`_targets.py` (APGD-T's targets: by logit, or MALT's) and `registry.py` (the attacks by name,
`run_attack`). A module shares its attack's name: import its parts
with `from gradkit.attacks.apgd import checkpoints`.
"""

from gradkit.attacks.apgd import apgd
from gradkit.attacks.ddn import ddn
from gradkit.attacks.fab import fab
from gradkit.attacks.fmn import fmn
from gradkit.attacks.pgd import bim
from gradkit.attacks.pgd import fgsm
from gradkit.attacks.pgd import pgd
from gradkit.attacks.square import square
from gradkit.attacks.geometry import TINY
from gradkit.attacks.geometry import default_eps_step
from gradkit.attacks.geometry import direction_tensor
from gradkit.attacks.geometry import per_sample_norm_tensor
from gradkit.attacks.geometry import project_and_clip_tensor
from gradkit.attacks._engine import tracing_losses
from gradkit.attacks._inputs import FlatInputs
from gradkit.attacks._inputs import is_several
from gradkit.attacks._frame import check_eps
from gradkit.attacks._frame import check_single_input
from gradkit.attacks._frame import gradient_for
from gradkit.attacks._frame import predict_labels
from gradkit.attacks._frame import prepare
from gradkit.attacks._frame import recording
from gradkit.attacks.registry import MIN_NORM_NAMES
from gradkit.attacks.registry import NAMES
from gradkit.attacks.registry import TABLE
from gradkit.attacks.registry import AttackResult
from gradkit.attacks.registry import decide
from gradkit.attacks.registry import is_ensemble
from gradkit.attacks.registry import run_attack

__all__ = [
    "MIN_NORM_NAMES",
    "NAMES",
    "TABLE",
    "TINY",
    "AttackResult",
    "apgd",
    "bim",
    "ddn",
    "decide",
    "default_eps_step",
    "direction_tensor",
    "fab",
    "fgsm",
    "fmn",
    "FlatInputs",
    "is_several",
    "check_eps",
    "check_single_input",
    "gradient_for",
    "is_ensemble",
    "per_sample_norm_tensor",
    "pgd",
    "predict_labels",
    "prepare",
    "project_and_clip_tensor",
    "recording",
    "run_attack",
    "square",
    "tracing_losses",
]
