"""The public names: `gradkit.*` and each subpackage's exports are pinned (a change here is an API change)."""

import importlib

import pytest

import gradkit

TOP = [
    "AdaBoostM1", "DisconnectedGradientError", "Evaluation", "GradientNormCallback", "InputGradient",
    "SAMME", "WeightGradient", "WeightedEnsemble", "apgd", "bim", "compare", "ddn", "evaluate", "fab", "fgsm",
    "fmn", "min_norm", "optimality",
    "gradient_norm", "input_gradient", "load", "pgd", "plot_grad_norm", "plot_robustness",
    "plot_training_diagnostics", "robustness_curve", "run_study",
    "square", "track_gradient_norm", "untrack_gradient_norm", "weight_gradients", "adversarial_training",
    "untrack_adversarial_training", "CatastrophicOverfittingCheck", "WorseThanRandomError",
    "OutOfMemoryError", "certify", "output_bounds", "Certificate", "smooth", "vote_certificate",
    "from_torch", "selftest",
]  # fmt: skip
PACKAGES = {
    "gradkit.gradients": [
        "AttackGradient", "InputGradient", "LossSpec", "WeightGradient", "WeightedEnsemble", "as_ensemble",
        "cached", "check_attack_loss", "check_classifier", "check_labels", "check_model",
        "check_sample_weight", "check_surrogate", "check_x", "compiled_spec",
        "from_torch", "input_gradient", "input_names", "labels_for_loss", "logits_model", "member_forward",
        "member_gradient_norms",
        "classes_from_outputs",
        "n_outputs", "output_index", "output_shape", "outputs_are_logits", "predict_batched",
        "predict_classes", "affine_of", "check_preprocessing", "preprocessed",
        "row_shape",
        "resolve_loss", "select_output", "training_kwargs",
        "weight_gradients", "weighted_vote",
    ],
    "gradkit.monitor": [
        "GradientNormCallback", "gradient_norm", "track_gradient_norm", "untrack_gradient_norm",
    ],
    "gradkit.attacks": [
        "NAMES", "TINY", "direction_tensor", "per_sample_norm_tensor", "project_and_clip_tensor",
        "AttackResult", "apgd", "bim", "ddn", "decide", "default_eps_step", "fab", "fgsm", "fmn",
        "gradient_for", "is_ensemble", "pgd", "predict_labels", "prepare", "run_attack", "square",
        "MIN_NORM_NAMES", "TABLE", "recording", "check_single_input", "tracing_losses", "FlatInputs",
        "is_several", "check_eps",
    ],
    "gradkit.boosting": ["AdaBoostM1", "BaseBoosting", "SAMME", "describe", "load"],
    "gradkit.certificates": [
        "METHODS", "Certificate", "SmoothedClassifier", "VoteCertificate", "certify", "member_weights",
        "output_bounds", "smooth", "vote_certificate",
    ],
    "gradkit.evaluation": [
        "Comparison", "Evaluation", "Shard", "certified_points", "check_curve", "compare", "evaluate",
        "evaluate_processes", "evaluate_shard", "evaluate_stream_shard", "merge_shards", "min_norm",
        "MinNormResult", "near_chance", "optimality", "paired_comparison",
        "read_shard",
        "robustness_curve", "selftest", "SelfTest",
        "shard_rows", "wilson_interval", "write_report",
    ],
    "gradkit.training": [
        "CatastrophicOverfittingCheck", "adversarial_training", "collapsed", "untrack_adversarial_training",
    ],
    "gradkit.study": [
        "ConfigError", "DEFAULTS", "DEFAULT_ADV_EPS", "DEFAULT_EPSILONS", "Dataset", "DatasetError", "MODELS",
        "NORMS", "QUICK", "QUICK_EPSILONS", "QUICK_SUBSET",
        "StudyConfig",
        "build_model", "format_table", "load_dataset", "load_digits", "load_mnist", "load_npz", "make_config",
        "run_study", "subsample",
    ],
}  # fmt: skip


def test_top_level_names_are_pinned_and_resolve():
    assert sorted(gradkit.__all__) == sorted(TOP)
    for name in TOP:
        assert getattr(gradkit, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gradkit.nope  # noqa: B018


def test_subpackages_are_attributes_after_import_gradkit():
    """`gradkit.attacks.decide` works after `import gradkit` alone: each subpackage is imported on first
    use (the call of `__getattr__` is what a fresh `import gradkit` meets)."""
    for name in gradkit._SUBPACKAGES:
        assert gradkit.__getattr__(name) is importlib.import_module(f"gradkit.{name}")
    assert set(gradkit._SUBPACKAGES) >= {p.split(".")[1] for p in PACKAGES}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_subpackage_exports_are_pinned(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PACKAGES[package])
    for name in module.__all__:
        assert getattr(module, name) is not None
