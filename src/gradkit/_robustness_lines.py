"""The pieces of `gradkit.plot_robustness`: its rows checked, their intervals, the lines and the legends.

Drawing only (on an axes the caller made); matplotlib is imported inside the functions, and nothing here
writes a file.
"""

import math
import numbers

import numpy as np

KEYS = ("model", "attack", "eps", "accuracy")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("--", ":", "-.", (0, (5, 1, 1, 1)))


def check_results(results):
    if not isinstance(results, (list, tuple)) or not results:
        raise TypeError(f"`results` must be a non-empty list of dicts. Received: {type(results).__name__}")
    groups = {}
    for i, row in enumerate(results):
        if not isinstance(row, dict) or any(k not in row for k in KEYS):
            raise ValueError(f"`results[{i}]` must be a dict with keys {list(KEYS)}. Received: {row!r:.120}")
        eps, acc = row["eps"], row["accuracy"]
        for name, value in (("eps", eps), ("accuracy", acc)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"`results[{i}]['{name}']` must be a finite number. Received: {value!r}")
        if eps < 0 or not 0 <= acc <= 1:
            raise ValueError(
                f"`results[{i}]` needs eps >= 0 and 0 <= accuracy <= 1. Received: eps={eps}, accuracy={acc}"
            )
        points = groups.setdefault((str(row["model"]), str(row["attack"])), {})
        if float(eps) in points:
            raise ValueError(
                f"`results[{i}]` repeats eps={eps} for model={row['model']!r}, attack={row['attack']!r}"
            )
        points[float(eps)] = float(acc)
    return groups


def bands(results):
    """{(model, attack): {eps: (low, high)}} from the rows' "ci_low"/"ci_high" where every row has both."""
    if not all("ci_low" in row and "ci_high" in row for row in results):
        return {}
    bands = {}
    for i, row in enumerate(results):
        low, high = row["ci_low"], row["ci_high"]
        if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real) and 0 <= low <= high <= 1):
            raise ValueError(
                f"`results[{i}]` needs 0 <= ci_low <= ci_high <= 1. Received: ci_low={low}, ci_high={high}"
            )
        bands.setdefault((str(row["model"]), str(row["attack"])), {})[float(row["eps"])] = (low, high)
    return bands


def legends(ax, models, attacks, bold, lower=None):
    """Two legends right of the axes: colour and marker = model, line = attack."""
    from matplotlib.lines import Line2D

    by_model = [
        Line2D([], [], color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)], linestyle="", label=m)
        for i, m in enumerate(models)
    ]
    by_attack = [
        Line2D(
            [],
            [],
            color="0.3",
            linewidth=3 if a == bold else 1.2,
            linestyle=_line(a, attacks, bold),
            label=_label(a, lower),
        )
        for a in attacks
    ]
    first = ax.legend(
        handles=by_model,
        title="model",
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
    )
    ax.add_artist(first)
    ax.legend(
        handles=by_attack,
        title="attack",
        fontsize="small",
        loc="lower left",
        bbox_to_anchor=(1.02, 0.0),
        borderaxespad=0,
    )


def _label(attack, lower):
    name = "worst case" if attack == "worst_case" else attack
    return f"{name} (lower edge)" if attack == lower else name


def _line(attack, attacks, bold):
    others = [a for a in attacks if a != bold]
    return "-" if attack == bold else _LINES[others.index(attack) % len(_LINES)]


def draw(ax, groups, bands, bold, lower=None):
    """One line (and band) per (model, attack), each shifted sideways a little; the `lower` attack's line
    is the lower edge of a band up to the model's `bold` line instead; returns (models, attacks)."""
    models = list(dict.fromkeys(model for model, _ in groups))
    attacks = list(dict.fromkeys(attack for _, attack in groups))
    all_eps = [e for points in groups.values() for e in points]
    step = 0.02 * (max(all_eps) - min(all_eps) or 1.0) / max(len(groups) - 1, 1)
    for k, ((model, attack), points) in enumerate(groups.items()):
        eps = np.array(sorted(points))
        x = eps + (k - (len(groups) - 1) / 2) * step  # a small sideways shift per line
        strong, i = attack == bold, models.index(model)
        color, name = f"C{i % 10}", "worst case" if attack == "worst_case" else attack
        ax.plot(
            x,
            [points[e] for e in eps],
            linestyle=_line(attack, attacks, bold),
            color=color,
            marker=_MARKERS[i % len(_MARKERS)],
            markersize=6 if strong else 4,
            linewidth=2.5 if strong else 1,
            alpha=1 if strong else 0.75,
            label=f"{model} / {name}",
        )
        if attack == lower and (model, bold) in groups:  # robust accuracy lies in this band
            top = groups[model, bold]
            shown = [j for j, e in enumerate(eps) if e in top]
            low, high = [points[eps[j]] for j in shown], [top[eps[j]] for j in shown]
            ax.fill_between(x[shown], low, high, color=color, alpha=0.08, linewidth=0)
        elif (model, attack) in bands:
            low, high = zip(*(bands[model, attack][e] for e in eps))
            ax.fill_between(x, low, high, color=color, alpha=0.15 if strong else 0.05, linewidth=0)
    return models, attacks
