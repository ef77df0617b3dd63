"""Runs the quick robustness study from Python and prints its table (about a minute on 2 CPU cores).

    KERAS_BACKEND=tensorflow python examples/study_quick.py [OUT_DIR]

Same as `gradkit study --quick --out OUT_DIR`; a second run with the same OUT_DIR resumes (loads the
trained models and reuses the finished rows) instead of starting over.
"""

import sys
import tempfile

from gradkit import study


def main(out):
    result = study.run_study({"quick": True, "out": out}, log=print)  # log: what a rerun reused
    print(study.format_table(result, out=out))  # the table, then the folder and its files
    for name, record in result["models"].items():
        fits = result["grad_norm"][name]  # one list of per-epoch values per fit (member)
        rows = result["results"]
        worst = {r["eps"]: r["accuracy"] for r in rows if (r["model"], r["attack"]) == (name, "worst_case")}
        print(
            f"{name}: clean accuracy {record['clean_accuracy']:.3f}, worst case at eps 0.1 "
            f"{worst[0.1]:.3f}, grad_norm first/last epoch {fits[0][0]:.3f}/{fits[-1][-1]:.3f}, "
            f"{record['train_seconds']:.0f} s of training"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gradkit-study-"))
