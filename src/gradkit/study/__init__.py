"""`gradkit study`: train a single network, an adversarially trained one, AdaBoost.M1 and adversarial
boosting; attack each; report.

`run_study(config)` trains four models on one data set (`load_dataset`), all with
`GradientNormCallback` (`_train`), attacks each at every eps of the study's norm (`_norms`) with each of
its attacks, keeping per test point the smallest eps that broke it and the per-sample worst case
(`_attack`), compares the models pairwise on the worst case by McNemar's exact test (`_compare`), and
writes an output folder that an interrupted run resumes from (`_outdir`, `_models`). The
configuration, the data sets and the table import no Keras; `run_study` and `build_model` are loaded on
first use, so `import gradkit.study` (and `gradkit study --help`) loads no backend.

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (FGSM, adversarial training).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD, adversarial training).
    Wong, Rice & Kolter (2020), "Fast is better than free: revisiting adversarial training", ICLR,
    https://arxiv.org/abs/2001.03994 (fast FGSM adversarial training).
    Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
    parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (the standard evaluation).
"""

import importlib

from gradkit.study._config import DEFAULTS
from gradkit.study._config import MODELS
from gradkit.study._config import QUICK
from gradkit.study._config import QUICK_SUBSET
from gradkit.study._config import ConfigError
from gradkit.study._config import StudyConfig
from gradkit.study._config import make_config
from gradkit.study._datasets import Dataset
from gradkit.study._datasets import DatasetError
from gradkit.study._datasets import load_dataset
from gradkit.study._datasets import load_digits
from gradkit.study._datasets import load_mnist
from gradkit.study._datasets import load_npz
from gradkit.study._norms import DEFAULT_ADV_EPS
from gradkit.study._norms import DEFAULT_EPSILONS
from gradkit.study._norms import NORMS
from gradkit.study._norms import QUICK_EPSILONS
from gradkit.study._datasets import subsample
from gradkit.study._table import format_table

_LAZY = {  # these modules import Keras (and with it a backend): loaded on first use
    "run_study": "gradkit.study._run",
    "build_model": "gradkit.study._models",
}

__all__ = [
    "DEFAULTS",
    "DEFAULT_ADV_EPS",
    "DEFAULT_EPSILONS",
    "MODELS",
    "NORMS",
    "QUICK",
    "QUICK_EPSILONS",
    "QUICK_SUBSET",
    "ConfigError",
    "Dataset",
    "DatasetError",
    "StudyConfig",
    "build_model",
    "format_table",
    "load_dataset",
    "load_digits",
    "load_mnist",
    "load_npz",
    "make_config",
    "run_study",
    "subsample",
]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gradkit.study' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
