"""The strong evaluation: `evaluate` runs a cascade of attacks (AutoAttack's standard version by default)
and returns an `Evaluation`: the per-sample worst case, what broke each point, the cost, and signs of
attack failure (`flags`). `check_curve` checks several evaluations at growing eps; `wilson_interval`
and `compare` (McNemar's exact test) give the uncertainty of accuracies and of the difference of two
models; `selftest` (the binarization test of Zimmermann et al. 2022) checks that an attack is strong
enough for the model at hand; `optimality` scores attacks' per-sample distances against their best
(AttackBench); `evaluate_shard`, `merge_shards`, `evaluate_processes` and `write_report` split an
evaluation into parts or processes and write its files (what `gradkit evaluate` and `gradkit merge` do);
`evaluate_stream_shard` is `evaluate_shard` on data that does not fit in memory.

References:
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690
    Carlini et al. (2019), "On evaluating adversarial robustness", https://arxiv.org/abs/1902.06705
    Zimmermann, Brendel, Tramer & Carlini (2022), "Increasing confidence in adversarial robustness
    evaluations", NeurIPS, https://arxiv.org/abs/2206.13991
"""

from gradkit.evaluation._certified import certified_points
from gradkit.evaluation._curve import robustness_curve
from gradkit.evaluation._flags import check_curve
from gradkit.evaluation._flags import near_chance
from gradkit.evaluation._merge import merge_shards
from gradkit.evaluation._min_norm import MinNormResult
from gradkit.evaluation._min_norm import min_norm
from gradkit.evaluation._optimality import optimality
from gradkit.evaluation._processes import evaluate_processes
from gradkit.evaluation._report import read_shard
from gradkit.evaluation._report import write_report
from gradkit.evaluation._result import Evaluation
from gradkit.evaluation._stats import Comparison
from gradkit.evaluation._stats import compare
from gradkit.evaluation._stats import paired_comparison
from gradkit.evaluation._stats import wilson_interval
from gradkit.evaluation._selftest import selftest
from gradkit.evaluation._selftest_result import SelfTest
from gradkit.evaluation._shards import Shard
from gradkit.evaluation._shards import evaluate_shard
from gradkit.evaluation._shards import shard_rows
from gradkit.evaluation._stream_shard import evaluate_stream_shard
from gradkit.evaluation._suite import evaluate

__all__ = [
    "Comparison",
    "Evaluation",
    "Shard",
    "certified_points",
    "check_curve",
    "compare",
    "evaluate",
    "evaluate_processes",
    "evaluate_shard",
    "evaluate_stream_shard",
    "merge_shards",
    "min_norm",
    "MinNormResult",
    "near_chance",
    "optimality",
    "paired_comparison",
    "read_shard",
    "robustness_curve",
    "selftest",
    "SelfTest",
    "shard_rows",
    "wilson_interval",
    "write_report",
]
