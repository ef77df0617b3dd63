"""`gradkit study`: train a single network, AdaBoost.M1 and adversarial boosting, attack each, report.

The study trains three models on one data set (`load_dataset`), all with `GradientNormCallback`:

- `single`: one network trained for `epochs * n_estimators` epochs, as many as AdaBoost.M1's members
  together;
- `adaboost_m1`: `AdaBoostM1` with `n_estimators` rounds of `epochs` epochs;
- `adv_boost`: the same with `adversarial={"attack": "fgsm", "eps": adv_eps, "clip_values": (0, 1)}`:
  each round also trains on FGSM examples against the ensemble so far (see `gradkit.SAMME`).

Then it attacks each model with each attack at each eps through `robustness_curve`
(`clip_values=(0, 1)`; PGD with `pgd_steps` steps, `eps_step = 2.5 * eps / pgd_steps`, random start
seeded with `seed`) and writes to the output directory:

    config.json          the configuration, backend and a data fingerprint (a rerun must match them)
    results.json         config, backend, dataset, n_train, n_test, models, results, grad_norm
    results.csv          the result rows: model, attack, eps, accuracy
    robustness.png       accuracy vs eps, one line per model and attack
    grad_norm.png        per-epoch gradient norm of each model during training
    single.keras         the single network; adaboost_m1/, adv_boost/: `gradkit.load`-able directories

`grad_norm[name]` holds the epoch means of `grad_norm`, in training order; for an ensemble, its members'
curves one after the other (round 0 of `adv_boost` fits twice: clean, then clean + adversarial).

Every file is written atomically, and results.json after each model and each (model, attack) curve, so
an interrupted run resumes: rerun it with the same `out` and configuration, and finished models are
loaded instead of retrained and finished rows are kept.

Modules: `_config` (the Keras-free configuration, the single source of defaults), `_datasets`,
`_run` (the orchestration), `_train`, `_models` (the model zoo and model files), `_outdir` (the output
folder), `_table`. The configuration, the data sets and the table import no Keras; `run_study` and
`build_model` are loaded on first use, so `import gradkit.study` (and `gradkit study --help`) loads no
backend.

References:
    Freund & Schapire (1996), "Experiments with a new boosting algorithm", ICML,
    https://dl.acm.org/doi/10.5555/3091696.3091715 (AdaBoost.M1).
    Goodfellow, Shlens & Szegedy (2015), "Explaining and harnessing adversarial examples", ICLR,
    https://arxiv.org/abs/1412.6572 (FGSM, adversarial training).
    Madry, Makelov, Schmidt, Tsipras & Vladu (2018), "Towards deep learning models resistant to
    adversarial attacks", ICLR, https://arxiv.org/abs/1706.06083 (PGD).
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
from gradkit.study._datasets import subsample
from gradkit.study._table import format_table

_LAZY = {  # these modules import Keras (and with it a backend): loaded on first use
    "run_study": "gradkit.study._run",
    "build_model": "gradkit.study._models",
}

__all__ = [
    "DEFAULTS",
    "MODELS",
    "QUICK",
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
