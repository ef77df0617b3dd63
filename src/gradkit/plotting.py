"""PNG plots: gradient norms over training (`plot_grad_norm`) and robustness curves (`plot_robustness`).

matplotlib is imported inside the functions and drawn on a bare `Figure` (Agg canvas), so importing
gradkit never loads it and pyplot's global state and backend are left alone. Files are written
atomically: to a temporary file in the target folder, then renamed over the target.
"""

import csv
import math
import os

import numpy as np

from gradkit._io import write_atomic
from gradkit._robustness_lines import bands, check_results, draw, legends

SIZE = (6.4, 4.0)  # inches
DPI = 100  # so images are 640 x 400 pixels
ROBUSTNESS_SIZE = (9.6, 4.8)  # inches: 960 x 480 pixels, room for the legends right of the axes


def _check(path, title):
    if title is not None and not isinstance(title, str):
        raise TypeError(f"`title` must be a str or None. Received: title={title!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`path` must be a str or os.PathLike. Received: path={path!r}")
    path = os.fspath(path)
    if not path.lower().endswith(".png"):
        raise ValueError(f"`path` must name a .png file. Received: path={path!r}")
    return path


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI))
    return path


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=DPI)  # a bare Figure: pyplot's state is left alone
    return fig, fig.subplots()


def _values(values, label):
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{label} must be a sequence of numbers. Received: {values!r:.80}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{label} must be a non-empty 1-D sequence. Received shape {arr.shape}")
    return arr


def _read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"`source` CSV file has no rows: {path!r}")
    return {key: [_cell(row[key]) for row in rows] for key in rows[0]}


def _cell(text):
    try:
        return float(text)
    except (TypeError, ValueError):  # CSVLogger writes "NA" for values missing in an epoch
        return math.nan


def _is_step_log(source):
    """True for a `gradkit.GradientNormCallback` (its `steps`: {name: [[value per step] per epoch]}),
    recognised by that attribute so that plotting imports no layer above it."""
    steps = getattr(source, "steps", None)
    return not isinstance(source, (dict, str, os.PathLike)) and isinstance(steps, dict)


def _curves(source):
    """(x label, {curve label: (x, y)}, {curve label: [x where an epoch or fit starts]}) from `source`."""
    if _is_step_log(source):
        if not source.steps:
            raise ValueError("`source` GradientNormCallback has recorded no steps yet (train with it first).")
        curves, bounds = {}, {}
        for key, epochs in source.steps.items():
            y = np.asarray([v for epoch in epochs for v in epoch], np.float64)
            curves[key] = (np.arange(1, y.size + 1), y)
            bounds[key] = list(np.cumsum([len(e) for e in epochs])[:-1] + 0.5)
        return "step", curves, bounds
    if isinstance(source, (str, os.PathLike)):
        if not os.path.isfile(source):
            raise ValueError(f"`source` names no file (expected a CSVLogger file). Received: {source!r}")
        source = _read_csv(source)
    elif hasattr(source, "history") and isinstance(source.history, dict):  # keras History
        source = source.history
    if not isinstance(source, dict) or not source:
        raise TypeError(
            "`source` must be a keras History, its .history dict, a CSVLogger file path, a "
            "GradientNormCallback or a non-empty dict {name: per-epoch values}. "
            f"Received: {type(source).__name__}"
        )
    keys = [k for k in source if str(k) == "grad_norm" or str(k).startswith("grad_norm/")]
    if keys or "loss" in source:  # a training history: plot its grad_norm columns
        if "grad_norm" not in keys:
            raise ValueError(
                "`source` is a training history without 'grad_norm': train with "
                f"gradkit.GradientNormCallback. Found keys: {sorted(map(str, source))}"
            )
    else:  # {model name: per-epoch values, or one list per fit}
        keys = list(source)
    curves, starts = {}, {}
    for key in keys:
        values = source[key]
        fits = [values] if _flat(values) else list(values)
        y = _values([v for fit in fits for v in fit], f"`source[{key!r}]`")
        curves[str(key)] = (np.arange(1, y.size + 1), y)
        starts[str(key)] = list(np.cumsum([len(fit) for fit in fits])[:-1] + 0.5)
    return "epoch", curves, starts


def _flat(values):  # True unless `values` is a sequence of sequences (one list per fit)
    return isinstance(values, np.ndarray) or not any(isinstance(v, (list, tuple, np.ndarray)) for v in values)


def _ticks(ax, y):
    """Integer epochs on x; plain 3-digit labels on the log y axis, more ticks on a narrow range."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    finite = y[np.isfinite(y) & (y > 0)]
    ratio = finite.max() / finite.min() if finite.size else np.inf
    if ratio < 3:  # log ticks would be one or none: evenly spaced ones, plain decimals
        ax.yaxis.set_major_locator(MaxNLocator(5))
    elif ratio < 100:
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    plain = ScalarFormatter(useOffset=False) if ratio < 3 else FuncFormatter(lambda v, _: f"{v:.3g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_grad_norm(source, path, *, title=None):
    """Writes a PNG of gradient norms over training, log-scale y axis.

    Args:
        source: one of
            - a `keras.callbacks.History` (what `fit` returns) or its `.history` dict: one curve per
              `grad_norm` / `grad_norm/<layer>` key, per epoch (epoch means);
            - a path to a `keras.callbacks.CSVLogger` file: the same columns;
            - a `gradkit.GradientNormCallback`: its per-step values, dotted lines between epochs;
            - a dict `{name: per-epoch values}` (no `"grad_norm"` or `"loss"` key): one curve per name,
              e.g. several models' `history["grad_norm"]`; a value may also be a list of lists, one
              per fit (a boosted model's members): drawn end to end, each fit's start marked by a
              dotted line in the curve's colour.
        path: str or PathLike ending in `.png`; missing folders are created; replaced atomically.
        title: optional title. Defaults to "Gradient norm".

    Returns:
        str, the path written (640 x 400 pixels).

    Non-positive, NaN and inf values cannot be drawn on a log axis and show as gaps.

    Raises:
        TypeError: an unsupported `source`; non-numeric values; a bad `path` or `title` type.
        ValueError: `path` not ending in `.png`; a missing CSV file; a history without `grad_norm`;
            empty or non-1-D value lists.
    """
    path = _check(path, title)
    xlabel, curves, bounds = _curves(source)
    fig, ax = _figure()
    for i, (label, (x, y)) in enumerate(curves.items()):
        y = np.where(np.isfinite(y) & (y > 0), y, np.nan)
        cuts = [int(b - 0.5) for b in bounds[label]] if xlabel == "epoch" else []
        for k, part in enumerate(np.split(np.arange(y.size), cuts)):  # one line per fit (member)
            style = {"marker": "." if y.size < 50 else None, "color": f"C{i % 10}"}
            ax.plot(x[part], y[part], label=None if k else label, **style)
        for b in bounds[label]:  # where each epoch (steps) or each fit (a boosted model's members) starts
            ax.axvline(b, color=f"C{i % 10}", linestyle=":", linewidth=0.8)
    ax.set_yscale("log")
    _ticks(ax, np.concatenate([y for _, y in curves.values()]))
    ax.set(xlabel=xlabel, ylabel="gradient L2 norm", title=title or "Gradient norm")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return _save(fig, path)


def plot_robustness(results, path, *, title=None, xlabel=None, bold="worst_case", caption=None, lower=None):
    """Writes a PNG of accuracy vs attack strength: one line per (model, attack), with 95% bands.

    Colour and marker name the model, the line style the attack (legends right of the axes, off the
    data). Lines are shifted sideways by a small step each (at most 2% of the eps range), so curves
    with equal values (every attack at eps 0, two models with the same accuracy) all stay visible.

    Args:
        results: non-empty list of dicts `{"model": str, "attack": str, "eps": float >= 0,
            "accuracy": float in [0, 1]}`, optionally with "ci_low" and "ci_high" (an interval, e.g.
            the 95% Wilson interval `gradkit study` writes; drawn as a band when every row has one);
            extra keys are ignored; at most one entry per (model, attack, eps). Points of a line are
            sorted by eps.
        path: str or PathLike ending in `.png`; missing folders are created; replaced atomically.
        title: optional title. Defaults to "Robustness".
        xlabel: optional x-axis label (say the norm and units of eps). Defaults to
            "eps (perturbation budget)".
        bold: the attack whose lines are drawn boldest (solid, thick), shown as "worst case" when it is
            "worst_case". Defaults to "worst_case".
        caption: optional str under the axes (say the number of points, the backend, the interval).
        lower: None, or the attack whose lines are the lower edge of a band up to the `bold` line of
            the same model (e.g. "certified": robust accuracy lies between a certified lower bound and
            the worst case), drawn thin and without their own interval. Defaults to None.

    Returns:
        str, the path written (960 x 480 pixels).

    Raises:
        TypeError: `results` is not a non-empty list; a bad `path`, `title` or `caption` type.
        ValueError: a missing key, a non-finite or out-of-range eps/accuracy, an interval outside
            [0, 1] or reversed, a repeated (model, attack, eps), `path` not ending in `.png`.
    """
    path = _check(path, title)
    if caption is not None and not isinstance(caption, str):
        raise TypeError(f"`caption` must be a str or None. Received: caption={caption!r}")
    groups, intervals = check_results(results), bands(results)
    from matplotlib.figure import Figure

    fig = Figure(figsize=ROBUSTNESS_SIZE, dpi=DPI)
    ax = fig.subplots()
    models, attacks = draw(ax, groups, intervals, bold, lower)
    ax.set(xlabel=xlabel or "eps (perturbation budget)", ylabel="accuracy", ylim=(-0.02, 1.02))
    ax.grid(True, alpha=0.3)
    ax.set_title(title or "Robustness")
    legends(ax, models, attacks, bold, lower)
    fig.subplots_adjust(left=0.07, right=0.8, top=0.92, bottom=0.2 if caption else 0.12)
    if caption:
        fig.text(0.07, 0.02, caption, fontsize="small", wrap=True)
    return _save(fig, path)
