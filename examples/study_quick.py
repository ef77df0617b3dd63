"""Runs the quick robustness study from Python and prints its table (about a minute on 2 CPU cores).

    KERAS_BACKEND=tensorflow python examples/study_quick.py [OUT_DIR]

Same as `gradkit study --quick --out OUT_DIR`; a second run with the same OUT_DIR resumes (loads the
trained models and reuses the finished rows) instead of starting over.
"""

import sys
import tempfile

from gradkit import study


def main(out):
    result = study.run_study({"quick": True, "out": out})
    print(study.format_table(result))
    for name, record in result["models"].items():
        curve = result["grad_norm"][name]
        print(
            f"{name}: clean accuracy {record['clean_accuracy']:.3f}, grad_norm first/last epoch "
            f"{curve[0]:.3f}/{curve[-1]:.3f}, {record['train_seconds']:.0f} s of training"
        )
    print(f"files in {out}: results.json, results.csv, robustness.png, grad_norm.png, models")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gradkit-study-"))
