"""plot_grad_norm / plot_robustness write real PNGs of the expected size and reject bad input."""

import keras
import matplotlib.image
import numpy as np
import pytest

import gradkit
import gradkit.plotting

from conftest import set_weights_from

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained 2 epochs x 2 steps with GradientNormCallback(per_layer=True) and CSVLogger."""
    folder = tmp_path_factory.mktemp("train")
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, name="a"), keras.layers.Dense(1, name="b")]
    )
    set_weights_from(model)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    callback = gradkit.GradientNormCallback(per_layer=True)
    csv_path = str(folder / "log.csv")
    history = model.fit(
        x,
        x[:, :1],
        batch_size=2,
        epochs=2,
        verbose=0,
        callbacks=[callback, keras.callbacks.CSVLogger(csv_path)],
    )
    return history, callback, csv_path


def assert_png(path, shape=(400, 640)):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == shape
    assert image[..., :3].std() > 0.01  # something was drawn


@pytest.mark.parametrize("kind", ["history", "dict", "csv", "callback", "models"])
def test_plot_grad_norm_sources(trained, tmp_path, kind):
    history, callback, csv_path = trained
    source = {
        "history": history,
        "dict": history.history,
        "csv": csv_path,
        "callback": callback,
        "models": {"small": history.history["grad_norm"], "other": [1.0, 0.5, np.nan, 0.1]},
    }[kind]
    path = tmp_path / "sub" / "norm.png"
    assert gradkit.plot_grad_norm(source, path) == str(path)
    assert_png(path)
    assert [p.name for p in path.parent.iterdir()] == ["norm.png"]  # no temporary file left behind


def test_callback_keeps_two_steps_per_epoch(trained):
    _, callback, _ = trained
    assert callback.epochs == [0, 1]
    assert set(callback.steps) == {"grad_norm", "grad_norm/a", "grad_norm/b"}
    assert [len(e) for e in callback.steps["grad_norm"]] == [2, 2]


def test_plot_robustness(tmp_path):
    results = [
        {"model": m, "attack": a, "eps": e, "accuracy": acc}
        for m, a, base in [("mlp", "fgsm", 0.9), ("mlp", "pgd", 0.9), ("boosted", "pgd", 0.95)]
        for e, acc in [(0.1, base - 0.3), (0.0, base), (0.2, base - 0.6)]
    ]
    path = tmp_path / "robustness.png"
    path.write_bytes(b"old")  # replaced
    assert gradkit.plot_robustness(results, str(path), title="MNIST") == str(path)
    assert_png(path, shape=(480, 960))


def test_robustness_bands_caption_legends_outside_and_every_curve_visible(tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    results = [
        {"model": m, "attack": a, "eps": e, "accuracy": 0.5, "ci_low": 0.45, "ci_high": 0.55}
        for m in ("single", "boost")
        for a in ("worst_case", "fgsm")
        for e in (0.0, 0.1, 0.2)
    ]  # four curves with identical values
    caption = "n = 450 test points, Keras backend jax"
    gradkit.plot_robustness(results, tmp_path / "r.png", caption=caption)
    fig = figures[0]
    (ax,) = fig.axes
    fig.canvas.draw()
    xs = [tuple(line.get_xdata()) for line in ax.get_lines()]
    assert len(set(xs)) == 4  # shifted apart: none hides another
    assert max(abs(a - b) for x in xs for a, b in zip(x, (0.0, 0.1, 0.2))) <= 0.02 * 0.2 / 2 + 1e-12
    assert len(ax.collections) == 4  # one band per curve
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.45) and band.max() == pytest.approx(0.55)
    markers = {line.get_color(): line.get_marker() for line in ax.get_lines()}
    assert len(set(markers.values())) == 2  # a marker per model, besides the colour
    frame = ax.get_window_extent()
    for legend in [*ax.artists, ax.get_legend()]:  # both legends right of the axes, off the data
        assert legend.get_window_extent().x0 >= frame.x1
    assert caption in [t.get_text() for t in fig.texts]
    with pytest.raises(ValueError, match="ci_low <= ci_high"):
        gradkit.plot_robustness([{**results[0], "ci_low": 0.6}], tmp_path / "bad.png")
    with pytest.raises(TypeError, match="`caption` must be a str"):
        gradkit.plot_robustness(results, tmp_path / "bad.png", caption=3)


@pytest.mark.parametrize(
    "source, path, error, match",
    [
        ({"loss": [1.0, 0.5]}, "a.png", ValueError, "without 'grad_norm'"),
        ("missing.csv", "a.png", ValueError, "names no file"),
        (42, "a.png", TypeError, "`source` must be"),
        ({"m": []}, "a.png", ValueError, "non-empty 1-D"),
        ({"m": ["x", "y"]}, "a.png", TypeError, "sequence of numbers"),
        ({"m": [1.0]}, "a.jpg", ValueError, "must name a .png file"),
        ({"m": [1.0]}, 3, TypeError, "`path` must be a str"),
    ],
)
def test_plot_grad_norm_rejects_bad_input(tmp_path, source, path, error, match):
    with pytest.raises(error, match=match):
        gradkit.plot_grad_norm(source, path if not isinstance(path, str) else tmp_path / path)
    assert not list(tmp_path.iterdir())


def test_empty_callback_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="recorded no steps"):
        gradkit.plot_grad_norm(gradkit.GradientNormCallback(), tmp_path / "a.png")


@pytest.mark.parametrize(
    "results, error, match",
    [
        ([], TypeError, "non-empty list"),
        ([{"model": "m", "attack": "a", "eps": 0.1}], ValueError, "keys"),
        ([{"model": "m", "attack": "a", "eps": -0.1, "accuracy": 0.5}], ValueError, "eps >= 0"),
        ([{"model": "m", "attack": "a", "eps": 0.1, "accuracy": 1.5}], ValueError, "accuracy <= 1"),
        ([{"model": "m", "attack": "a", "eps": float("nan"), "accuracy": 0.5}], ValueError, "finite number"),
        ([{"model": "m", "attack": "a", "eps": 0.1, "accuracy": 0.5}] * 2, ValueError, "repeats eps=0.1"),
    ],
)
def test_plot_robustness_rejects_bad_input(tmp_path, results, error, match):
    with pytest.raises(error, match=match):
        gradkit.plot_robustness(results, tmp_path / "r.png")
    assert not list(tmp_path.iterdir())


def _captured(monkeypatch):
    """Replaces plotting's file writer so a test can read the figure it drew."""
    figures = []
    monkeypatch.setattr(gradkit.plotting, "_save", lambda fig, path: figures.append(fig) or path)
    return figures


def test_two_epoch_history_has_integer_epoch_ticks(trained, tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    gradkit.plot_grad_norm(trained[0], tmp_path / "g.png")
    (ax,) = figures[0].axes
    figures[0].canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_narrow_range_log_axis_has_plain_labels(tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    gradkit.plot_grad_norm({"a": [0.84175, 0.8419, 0.8421, 0.8423]}, tmp_path / "g.png")
    figures[0].canvas.draw()
    (ax,) = figures[0].axes
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]
    assert len(set(labels)) == len(labels) >= 2, labels  # distinct, plain decimals
    assert all("times" not in s and "^" not in s and len(s) <= 7 for s in labels), labels
    gradkit.plot_grad_norm({"a": [1e-3, 1.0, 10.0]}, tmp_path / "wide.png")  # a wide range too
    figures[1].canvas.draw()
    labels = [t.get_text() for t in figures[1].axes[0].get_yticklabels() if t.get_text()]
    assert labels and all("^" not in s for s in labels), labels


def test_one_list_per_member_marks_where_each_starts(tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    gradkit.plot_grad_norm({"boost": [[3.0, 2.0, 1.0], [4.0, 2.0]], "single": [5.0, 4.0]}, tmp_path / "g.png")
    (ax,) = figures[0].axes
    members = [list(line.get_xdata()) for line in ax.get_lines() if line.get_color() == "C0"]
    assert members[:2] == [[1, 2, 3], [4, 5]]  # one line per member, end to end
    starts = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert starts == [3.5]
    monkeypatch.undo()
    assert_png(gradkit.plot_grad_norm({"boost": [[3.0, 2.0], [4.0, 2.0]]}, tmp_path / "real.png"))


def test_worst_case_is_drawn_boldest_with_eps_units(tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    results = [
        {"model": m, "attack": a, "eps": e, "accuracy": acc}
        for m in ("single", "boost")
        for a, acc in (("fgsm", 0.8), ("worst_case", 0.5))
        for e in (0.0, 0.1)
    ]
    gradkit.plot_robustness(results, tmp_path / "r.png", xlabel="eps (Linf, input units)")
    (ax,) = figures[0].axes
    widths = {line.get_label(): line.get_linewidth() for line in ax.get_lines()}
    assert widths["single / worst case"] > widths["single / fgsm"]
    assert ax.get_xlabel() == "eps (Linf, input units)"


def test_a_lower_row_is_the_lower_edge_of_a_band_up_to_the_worst_case(tmp_path, monkeypatch):
    figures = _captured(monkeypatch)
    values = {"worst_case": (0.9, 0.6, 0.3), "certified": (0.9, 0.2, 0.0), "pgd": (0.9, 0.7, 0.4)}
    results = [
        {"model": "single", "attack": a, "eps": e, "accuracy": v, "ci_low": v * 0.9, "ci_high": v}
        for a, vs in values.items()
        for e, v in zip((0.0, 0.1, 0.3), vs)
    ]
    gradkit.plot_robustness(results, tmp_path / "r.png", lower="certified")
    (ax,) = figures[0].axes
    assert len(ax.collections) == 3  # the worst case's and pgd's intervals, and the certified band
    edge = ax.collections[1].get_paths()[0].vertices[:, 1]  # drawn second, with the certified line
    assert edge.min() == pytest.approx(0.0) and edge.max() == pytest.approx(0.9)
    assert set(np.round(edge, 6)) == {0.0, 0.2, 0.9, 0.6, 0.3}  # from certified up to the worst case
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "certified (lower edge)" in labels and "pgd" in labels
