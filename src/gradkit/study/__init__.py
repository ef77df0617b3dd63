"""`gradkit study`: train a single network, an adversarially trained one, AdaBoost.M1 and adversarial
boosting; attack each; report.

The study trains four models on one data set (`load_dataset`), all with `GradientNormCallback`:

- `single`: one network trained for `epochs * n_estimators` epochs, as many as AdaBoost.M1's members
  together;
- `adv_single`: the same network and epochs with `gradkit.adversarial_training` (PGD with
  `adv_steps` steps at `adv_eps` inside each training step, or fast FGSM with a random start): the
  baseline adversarial boosting is compared with;
- `adaboost_m1`: `AdaBoostM1` with `n_estimators` rounds of `epochs` epochs;
- `adv_boost`: the same with `adversarial={"attack": "pgd", "eps": adv_eps, "steps": adv_steps,
  "mode": adv_mode, ...}`: in mode "augment" each round also trains on PGD examples against the
  ensemble so far, in mode "fit" each member is adversarially trained as `adv_single`; either way its
  weighted error counts a point as wrong when the member gets it or its adversarial example wrong (see
  `gradkit.AdaBoostM1`).

Then it attacks each model at each eps (in the study's `norm`, "linf", "l2" or "l1", in input units,
`clip_values=(0, 1)`; each norm has its default eps list, see `_norms`) with each of `attacks`: "fgsm",
"pgd" (`pgd_steps`, `eps_step = 2.5 * eps / pgd_steps`), "apgd-ce", "apgd-t", "square" and "standard"
(`gradkit.evaluate`'s cascade, AutoAttack's standard version for the norm, ensemble-aware on boosted
models), all through `gradkit.evaluate`; "fmn", "fab" and "ddn" (L2) run one minimum-norm attack per
model that gives every eps. Adversarial training runs at the norm too (at Linf under "l1": gradkit's
adversarial training takes Linf and L2). Per test point it keeps the smallest eps at which each attack
fooled it; a point broken at eps e stays broken at larger eps, so each eps attacks only the points still
robust, and "standard" runs last on the points no attack broke. The table and the plot lead with the
per-sample worst case; a single attack's rows are therefore cumulative (not broken by it at this eps or
below), and the "standard" rows give its accuracy on the points it attacked. Every row carries its 95%
Wilson score interval and its number of points, and the models are compared pairwise on the worst case
by McNemar's exact test (`gradkit.compare`). The output directory holds:

    config.json          the configuration, backend and a data fingerprint (a rerun must match them)
    results.json         config, backend, dataset, norm, adv_norm, n_train, n_test, models, results,
                         evaluations, warnings, samples, grad_norm, comparisons, statistics
    results.csv          the result rows: model, attack ("worst_case", "fgsm", ..., "standard"), norm, eps,
                         accuracy, ci_low, ci_high, n_points, scope
    samples.csv          per test point: label, and per model clean correct, the smallest eps that
                         broke it and by which attack (with "fmn": its minimal norm found)
    robustness.png       accuracy vs eps, one line per model and attack, the worst case boldest,
                         95% bands
    grad_norm.png        per-epoch gradient norm, a panel per model (plot_training_diagnostics),
                         boosted members labelled
    single.keras         the single network; adv_single.keras the adversarially trained one (no trace
                         of adversarial training); adaboost_m1/, adv_boost/: `gradkit.load`-able
                         directories

`grad_norm[name]` holds one list of epoch means of `grad_norm` per `fit` (in mode "augment" round 0
of `adv_boost` fits twice: clean, then clean + adversarial).

Every file is written atomically, and results.json after each model and each (model, eps), so an
interrupted run resumes: rerun it with the same `out` and configuration, and finished models are
loaded instead of retrained and finished results are kept (`run_study(..., log=print)` says so).

Modules: `_config` (the Keras-free configuration, the single source of defaults), `_norms` (the
threat models and their defaults), `_datasets`,
`_keras_data` (MNIST, Fashion-MNIST, CIFAR-10), `_run` (the orchestration), `_train`, `_attack`
(the attacks, the per-sample worst case, the rows and their intervals), `_compare` (the paired
tests), `_models` (the model zoo and model files), `_outdir`
(the output folder), `_table`. The configuration, the data sets and the table import no Keras; `run_study` and
`build_model` are loaded on first use, so `import gradkit.study` (and `gradkit study --help`) loads no
backend.

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
