"""gradkit: compiled loss gradients for Keras 3 classifiers on TensorFlow, JAX and PyTorch.

Everything is importable from the top level (`gradkit.pgd`, `gradkit.AdaBoostM1`, ...). Submodules are
imported on first use, so `import gradkit` stays fast and plotting code never loads matplotlib early.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # gradient engine
    "InputGradient": "gradkit.gradients",
    "WeightGradient": "gradkit.gradients",
    "input_gradient": "gradkit.gradients",
    "weight_gradients": "gradkit.gradients",
    "WeightedEnsemble": "gradkit.gradients",
    "from_torch": "gradkit.gradients",
    "DisconnectedGradientError": "gradkit.errors",
    "OutOfMemoryError": "gradkit.errors",
    "WorseThanRandomError": "gradkit.errors",
    # gradient-norm diagnostics
    "gradient_norm": "gradkit.monitor",
    "GradientNormCallback": "gradkit.monitor",
    "track_gradient_norm": "gradkit.monitor",
    "untrack_gradient_norm": "gradkit.monitor",
    "plot_grad_norm": "gradkit.plotting",
    "plot_training_diagnostics": "gradkit._diagnostic_plots",
    "plot_robustness": "gradkit.plotting",
    # attacks
    "fgsm": "gradkit.attacks",
    "bim": "gradkit.attacks",
    "pgd": "gradkit.attacks",
    "apgd": "gradkit.attacks",
    "fab": "gradkit.attacks",
    "square": "gradkit.attacks",
    "fmn": "gradkit.attacks",
    "ddn": "gradkit.attacks",
    "min_norm": "gradkit.evaluation",
    "robustness_curve": "gradkit.evaluation",
    "evaluate": "gradkit.evaluation",
    "Evaluation": "gradkit.evaluation",
    "compare": "gradkit.evaluation",
    "selftest": "gradkit.evaluation",
    "optimality": "gradkit.evaluation",
    # certified bounds
    "certify": "gradkit.certificates",
    "output_bounds": "gradkit.certificates",
    "Certificate": "gradkit.certificates",
    "smooth": "gradkit.certificates",
    "vote_certificate": "gradkit.certificates",
    # adversarial training
    "adversarial_training": "gradkit.training",
    "untrack_adversarial_training": "gradkit.training",
    "CatastrophicOverfittingCheck": "gradkit.training",
    # boosting
    "AdaBoostM1": "gradkit.boosting",
    "SAMME": "gradkit.boosting",
    "load": "gradkit.boosting",
    # study
    "run_study": "gradkit.study",
}

__all__ = sorted(_EXPORTS)


# the subpackages, imported on first use as `gradkit.attacks` (as after `import gradkit.attacks`)
_SUBPACKAGES = (
    "attacks",
    "backend",
    "boosting",
    "certificates",
    "errors",
    "evaluation",
    "gradients",
    "monitor",
    "plotting",
    "study",
    "training",
)


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"gradkit.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gradkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
