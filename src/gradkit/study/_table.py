"""The study's results as a text table (what `gradkit study` prints)."""

from gradkit.study._config import MODELS


def _row(label, cells, width):
    return f"{label:<{width}}" + "".join(f"{cell:>10}" for cell in cells)


def format_table(state):
    """The study's results as text: one block per attack, models x epsilons, and the backend used.

    Args:
        state: the dict `run_study` returns (or results.json loaded).

    Returns:
        str, one line per model and attack, accuracies with 3 decimals ("-" for a missing row).
    """
    config = state["config"]
    epsilons = config["epsilons"]
    width = max(len(name) for name in MODELS) + 2
    lines = [
        f"gradkit study - Keras backend: {state['backend']} - data: {state['dataset']} "
        f"({state['n_train']} train / {state['n_test']} test, model {config['model']})",
        "clean accuracy: " + ", ".join(f"{n} {state['models'][n]['clean_accuracy']:.3f}" for n in MODELS),
    ]
    rows = {(r["model"], r["attack"], r["eps"]): r["accuracy"] for r in state["results"]}
    for attack in config["attacks"]:
        lines += ["", _row(f"{attack} accuracy", (f"eps={e:g}" for e in epsilons), width)]
        for name in MODELS:
            cells = (rows.get((name, attack, e)) for e in epsilons)
            lines.append(_row(name, ("-" if c is None else f"{c:.3f}" for c in cells), width))
    return "\n".join(lines)
