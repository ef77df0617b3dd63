"""`plot_training_diagnostics`: one PNG of the training diagnostics in a History, a panel per group.

Kept apart from `plotting.py`, with the same rules: matplotlib imported inside the function, a bare
`Figure`, the file written atomically.
"""

import math
import os

import numpy as np

from gradkit import _checks
from gradkit._io import write_atomic

# Panels in order: (title, keys drawn on it). Keys absent from the history are skipped.
_PANELS = (
    ("gradient norm (raw, clipped)", ("grad_norm", "grad_norm_clipped")),
    ("clip fraction", ("clip_fraction",)),
    ("parameter norm", ("param_norm",)),
    ("update norm", ("update_norm",)),
    ("update / parameter norm", ("update_ratio",)),
    ("max |gradient|", ("grad_max",)),
    ("non-finite entries, zero fraction", ("grad_nonfinite", "grad_zero_fraction")),
    ("gradient noise scale B_simple", ("noise_scale",)),
)
_BAND = (10**-3.5, 10**-2.5)  # around the usual healthy update ratio, 1e-3


def _check(path, title):
    if title is not None and not isinstance(title, str):
        _checks.fail("title", "a str or None", title, TypeError)
    if not isinstance(path, (str, os.PathLike)):
        _checks.fail("path", "a str or os.PathLike", path, TypeError)
    if not os.fspath(path).lower().endswith(".png"):
        _checks.fail("path", "a .png file name", os.fspath(path))
    return os.fspath(path)


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    return path


def _series(history):
    """`{key: per-epoch floats}` from a `keras.callbacks.History` or a dict like its `history`."""
    logs = getattr(history, "history", history)
    if not isinstance(logs, dict) or not logs:
        raise TypeError(
            "`history` must be a keras.callbacks.History or a non-empty dict {key: per-epoch values}. "
            f"Received: history={history!r:.80}"
        )
    return {str(k): np.asarray(v, np.float64).ravel() for k, v in logs.items()}


def _threshold(history, clip_threshold):
    if clip_threshold is not None:
        if not isinstance(clip_threshold, (int, float)) or not clip_threshold > 0:
            raise ValueError(
                f"`clip_threshold` must be a number > 0. Received: clip_threshold={clip_threshold!r}"
            )
        return float(clip_threshold)
    optimizer = getattr(getattr(history, "model", None), "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    for kind in ("clipnorm", "global_clipnorm"):
        value = getattr(optimizer, kind, None)
        if value:
            return float(value)
    return None


def _draw(ax, series, keys, epochs):
    """The global line of each key (thick) and its per-layer lines (thin, labelled by layer)."""
    drawn = []
    for n, (style, key) in enumerate(zip(("-", "--"), keys)):
        if key in series:
            ax.plot(epochs, series[key], style, lw=2.2, color="black", label=key)
            drawn.append(series[key])
        layers = sorted(k for k in series if k.startswith(key + "/"))
        for i, name in enumerate(layers):
            label = name.split("/", 1)[1] + (f" ({key})" if n else "")
            ax.plot(epochs, series[name], style, lw=1.0, color=f"C{i}", label=label)
            drawn.append(series[name])
    return np.concatenate(drawn) if drawn else np.array([])


def _log_if_decades(ax, values):
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size and positive.max() / positive.min() > 100:
        ax.set_yscale("log")


def plot_training_diagnostics(history, path, *, clip_threshold=None, title=None):
    """Draws the diagnostics of `GradientNormCallback(include=...)` per epoch into one PNG, a panel per group.

    Panels (only those whose keys the history has): raw `grad_norm` and `grad_norm_clipped` on one axis
    with the clip threshold; `clip_fraction`; `param_norm`; `update_norm`; `update_ratio` (log scale,
    with a band from 10^-3.5 to 10^-2.5 around the usual healthy 1e-3); `grad_max`; `grad_nonfinite`
    and `grad_zero_fraction`; `noise_scale` (B_simple, in rows). On each, the global value is a thick
    black line and each layer's (`"<key>/<layer>"`) a thin line labelled with the layer's name. A panel
    whose positive values span more than two decades gets a log scale.

    Given a dict `{model name: history}` instead (what `gradkit study` draws into grad_norm.png), one
    panel per model, titled with its name: its raw and clipped gradient norms (global and per layer)
    per epoch; a model given as a list of histories (a boosted model's members, one `fit` each) has
    its members drawn end to end, each labelled "member i".

    Args:
        history: a `keras.callbacks.History` (what `fit` returns) or a dict `{key: per-epoch values}`;
            or a dict `{model name: a History or such a dict, or a list of them}`.
        path: where to write the PNG (must end in ".png"; folders are created, the file is replaced
            atomically).
        clip_threshold: the `clipnorm` / `global_clipnorm` to draw. Defaults to None: the History's
            model's optimizer's, if any.
        title: the figure's title. Defaults to None.

    Returns:
        `path`, as a str.

    Raises:
        TypeError: `history` is neither a History nor a non-empty dict; `path` or `title` of the wrong type.
        ValueError: `path` does not end in ".png"; the history has none of the diagnostic keys;
            `clip_threshold` is not > 0.
    """
    from matplotlib.figure import Figure

    path = _check(path, title)
    if _is_by_model(history):
        return _save(_by_model(Figure, history, title), path)
    series = _series(history)
    threshold = _threshold(history, clip_threshold)
    panels = [
        (t, keys)
        for t, keys in _PANELS
        if any(k == key or k.startswith(key + "/") for key in keys for k in series)
    ]
    if not panels:
        raise ValueError(
            "`history` has no training diagnostics (grad_norm, param_norm, ...): train with "
            f"gradkit.GradientNormCallback. Found keys: {sorted(series)}"
        )
    rows = math.ceil(len(panels) / 2)
    fig = Figure(figsize=(11, 3.2 * rows), dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, 2 if len(panels) > 1 else 1)).ravel()
    epochs = np.arange(1, max(len(v) for v in series.values()) + 1)
    for ax, (name, keys) in zip(axes, panels):
        values = _draw(ax, {k: v for k, v in series.items() if len(v) == len(epochs)}, keys, epochs)
        if "grad_norm_clipped" in keys and threshold is not None:
            ax.axhline(threshold, color="red", ls=":", label=f"clip threshold {threshold:g}")
        if "update_ratio" in keys:
            ax.axhspan(*_BAND, color="green", alpha=0.15, label="healthy ~1e-3")
            ax.set_yscale("log")
        else:
            _log_if_decades(ax, values)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch")
        ax.legend(fontsize=7)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def _is_by_model(history):
    """Whether `history` is `{model name: history or list of histories}` (not one History's dict)."""
    if not isinstance(history, dict) or not history:
        return False
    values = list(history.values())
    return all(isinstance(getattr(v, "history", v), dict) or _is_members(v) for v in values)


def _is_members(value):
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(getattr(m, "history", m), dict) for m in value)
    )


def _by_model(figure, models, title):
    """The figure of one panel per model (see `plot_training_diagnostics`)."""
    rows = math.ceil(len(models) / 2)
    fig = figure(figsize=(11, 3.2 * rows), dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, 2 if len(models) > 1 else 1)).ravel()
    for ax, (name, value) in zip(axes, models.items()):
        if _is_members(value):
            start = 1
            for i, member in enumerate(value, start=1):
                values = _series(member).get("grad_norm", np.array([]))
                epochs = np.arange(start, start + len(values))
                ax.plot(epochs, values, "-", lw=1.4, color=f"C{(i - 1) % 10}", label=f"member {i}")
                start += len(values)
            drawn = np.concatenate([_series(m).get("grad_norm", np.array([])) for m in value])
        else:
            series = _series(value)
            epochs = np.arange(1, max(len(v) for v in series.values()) + 1)
            drawn = _draw(
                ax, {k: v for k, v in series.items() if len(v) == len(epochs)}, _PANELS[0][1], epochs
            )
        _log_if_decades(ax, drawn)
        ax.set_title(str(name), fontsize=10)
        ax.set(xlabel="epoch", ylabel="gradient L2 norm")
        ax.legend(fontsize=7)
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
