"""The Square Attack (`gradkit.attacks.square`) on the device against its numpy reference
(`oracles.square`): the random streams differ, so the device run is checked on what the reference
guarantees (ball and box, flags read off the decision, query counts, the easy rows broken) and on the
same success rates; its proposals on the reference's rules; the redraw rule's window sums over a patch
against the whole-image formula; one trace for every eps, budget and `p_init`; the early stop read at the
fixed check interval; the bound forward pass; L1 inside the ball and the box."""

import sys

import keras
import numpy as np
import pytest
from keras import ops

import gradkit
from gradkit import backend
from gradkit.attacks import _engine, decide, recording
from gradkit.attacks.square import draws, l2_proposal, linf_proposal, p_schedule
from helpers.models import accuracy, l1_sizes
from oracles.square import square_core

SQUARE = sys.modules["gradkit.attacks.square"]  # the module (`gradkit.attacks.square` is the function)


SHAPE, C = (8, 8, 2), 4


D = int(np.prod(SHAPE))


RNG = np.random.default_rng(1)


W = RNG.normal(size=(D, C)).astype(np.float32)


B = (RNG.normal(size=C) * 0.1).astype(np.float32)


X0 = RNG.uniform(0.2, 0.8, size=(120,) + SHAPE).astype(np.float32)


EPS = {np.inf: 0.015, 2: 0.15, 1: 0.5}


def linear():
    model = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(C)])
    model.set_weights([W, B])
    return model


def labels_of(x):
    return (x.reshape(len(x), -1).astype(np.float64) @ W + B).argmax(axis=1)


def margin_forward(x, labels, targets=None):
    z = x.reshape(len(x), -1).astype(np.float64) @ W + B
    others = np.where(np.eye(C, dtype=bool)[labels], -np.inf, z)
    return others.max(axis=1) - z[np.arange(len(z)), labels], z.argmax(axis=1)


def square_run(model, x, y, **kwargs):
    """`gradkit.square` and its frame (its counts and objective): `(x_adv, success, frame)`."""
    with recording() as record:
        x_adv = gradkit.square(model, x, y, **kwargs)
    return x_adv, record.success, record.frame


def distance(a, b, norm):
    d = (a - b).reshape(len(a), -1).astype(np.float64)
    if norm == 1:
        return np.abs(d).sum(axis=1)
    return np.abs(d).max(axis=1) if norm == np.inf else np.sqrt((d**2).sum(axis=1))


@pytest.mark.parametrize("norm", [np.inf, 2, 1])
def test_engine_keeps_the_reference_guarantees_and_success_rate(norm):
    labels, n_queries, eps = labels_of(X0), 200, EPS[norm]
    options = dict(eps=eps, norm=norm, n_queries=n_queries, p_init=0.3, clip_values=(0.0, 1.0))
    _, ref_success, ref_used = square_core(margin_forward, X0, labels, rng=0, **options)
    adv, success, session = square_run(linear(), X0, labels, eps=eps, norm=norm, n_queries=n_queries,
                                       p_init=0.3, clip_values=(0, 1), seed=0)  # fmt: skip
    assert np.all(distance(adv, X0, norm) <= eps + 1e-6) and adv.min() >= 0 and adv.max() <= 1
    np.testing.assert_array_equal(labels_of(adv) != labels, success)
    assert abs(success.mean() - ref_success.mean()) <= 0.1, (success.mean(), ref_success.mean())
    assert np.all(success[ref_used <= 2]) and not success.all()  # what the start breaks, both break
    assert abs(session.n_forwards - ref_used.sum()) <= 0.1 * ref_used.sum() and session.n_gradients == 0


@pytest.mark.parametrize("norm", [np.inf, 2])
def test_query_counts_per_row(norm, monkeypatch):
    used_seen = []
    device = SQUARE.run

    def keep(*args, **kwargs):
        out = device(*args, **kwargs)
        used_seen.append(out[2])
        return out

    monkeypatch.setattr(SQUARE, "run", keep)
    labels = labels_of(X0)
    _, success, session = square_run(linear(), X0, labels, eps=EPS[norm], norm=norm, n_queries=150,
                                     p_init=0.3, clip_values=(0, 1), seed=1)  # fmt: skip
    (used,) = used_seen
    assert used.dtype == np.int64 and session.n_forwards == used.sum()
    assert np.all(used[~success] == 150) and np.all(used[success] <= 150) and np.all(used >= 1)


def test_one_trace_for_any_eps_budget_and_p_init():
    model, labels = linear(), labels_of(X0[:40])
    for eps, n_queries, p_init in [(0.01, 30, 0.8), (0.02, 70, 0.3), (0.05, 250, 0.05)]:
        _, _, session = square_run(model, X0[:40], labels, eps=eps, n_queries=n_queries, p_init=p_init,
                                   clip_values=(0, 1), seed=0)  # fmt: skip
    steps = [s for key, s in session.objective._fn.steps.items() if key[0] == "search"]
    assert len(steps) == 1 and steps[0].trace_count == 1


def test_schedule_tables_follow_p_schedule():
    for n_queries, p_init in [(10000, 0.8), (1000, 0.3), (37, 0.5), (1, 0.8)]:
        starts, sides, _ = SQUARE.schedule(p_init, n_queries, 32, 32, np.inf)
        for i in range(n_queries - 1):
            stage = int(np.sum(i >= starts))
            assert np.isclose(p_init / 2**stage, p_schedule(p_init, i, n_queries)), (n_queries, i)
        assert sides[0, 0] == round(np.sqrt(p_init * 1024)) and np.all(np.diff(sides[:, 0]) <= 0)


def _tensor(a):
    return backend.to_tensor(np.ascontiguousarray(a, dtype=np.float32))


@pytest.mark.parametrize("channels", [1, 3])
def test_linf_proposal_changes_one_window_to_the_corners(channels):
    """As the numpy reference's test: one-pixel windows already on the `+` corner change with
    probability 1 - 2^-(8 c) per sample (the sign redraws); wider windows change in one window only."""
    rng, n = np.random.default_rng(0), 500
    x0 = rng.uniform(0.2, 0.8, size=(n, 6, 6, channels)).astype(np.float32)
    best, ends = x0 + np.float32(0.1), [x0 + np.float32(0.1), x0 - np.float32(0.1)]
    for side, most in ((1, 1), (4, 16)):
        sides = backend.to_tensor(np.asarray([side, side], np.int32))
        u, _ = backend.uniform((n, draws(np.inf, channels)), backend.seed_state(side))
        cand = linf_proposal(_tensor(best), [_tensor(e) for e in ends], sides, u)
        cand = backend.to_numpy(cand)
        changed = (np.abs(cand - best).max(axis=3) > 1e-7).reshape(n, -1)
        assert changed.sum(axis=1).max() == most and changed.any(axis=1).mean() > 0.97
        np.testing.assert_allclose(np.abs(cand - x0), 0.1, atol=1e-6)


def test_l2_proposal_stays_on_the_sphere_and_rescales_outside_its_windows():
    rng, n, eps = np.random.default_rng(0), 300, 0.5
    x0 = rng.uniform(0.3, 0.7, size=(n, 10, 10, 2)).astype(np.float32)
    delta = rng.normal(size=x0.shape).astype(np.float32)
    best = x0 + eps * delta / np.linalg.norm(delta.reshape(n, -1), axis=1).reshape(n, 1, 1, 1)
    _, sides, patterns = SQUARE.schedule(0.1, 1000, 10, 10, 2)
    stage = backend.to_tensor(np.asarray(0, np.int32))
    u, _ = backend.uniform((n, draws(2, 2)), backend.seed_state(0))
    cand = l2_proposal(_tensor(best), _tensor(x0), _engine.scalar(eps), backend.to_tensor(patterns),
                       stage, backend.to_tensor(sides[0]), u, None)  # fmt: skip
    new = backend.to_numpy(cand) - x0
    np.testing.assert_allclose(distance(new + x0, x0, 2), eps, rtol=1e-4)
    ratio = new / (best - x0)
    same = np.isclose(ratio, np.median(ratio.reshape(n, -1), axis=1).reshape(n, 1, 1, 1), rtol=1e-3)
    outside = same.reshape(n, -1).mean(axis=1)  # two 3x3 windows of 100 pixels change at most
    assert outside.min() >= 0.819 and np.mean(outside < 1) > 0.9


def test_rows_that_all_succeed_stop_at_the_first_check(monkeypatch):
    counted, advance = [], _engine.advance
    monkeypatch.setattr(_engine, "advance", lambda *a: counted.append(a[-1]) or advance(*a))
    labels = labels_of(X0[:20])
    _, success, session = square_run(linear(), X0[:20], labels, eps=0.5, n_queries=1000,
                                     clip_values=(0, 1), seed=0)  # fmt: skip
    assert success.all() and counted == [SQUARE.CHECK_EVERY]
    assert session.n_forwards < 20 * 10  # the start, a few proposals: frozen rows are not counted


def test_seeded_repeat_and_eps_zero():
    labels = labels_of(X0[:30])
    first = gradkit.square(linear(), X0[:30], labels, eps=0.05, n_queries=60, seed=3)
    np.testing.assert_array_equal(
        first, gradkit.square(linear(), X0[:30], labels, eps=0.05, n_queries=60, seed=3)
    )
    assert not np.array_equal(
        first, gradkit.square(linear(), X0[:30], labels, eps=0.05, n_queries=60, seed=4)
    )
    np.testing.assert_array_equal(gradkit.square(linear(), X0[:30], labels, eps=0.0, n_queries=60), X0[:30])


def _mask_sums(best, ends, u, sides, h, w):
    """The previous formula: the window as a float mask over the whole image."""
    corners = SQUARE._corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
    in_rows, in_cols, _, _ = SQUARE._edges(*corners, sides[0], sides[1], h, w)
    m = ops.expand_dims(ops.cast(ops.logical_and(ops.expand_dims(in_rows, 2), ops.expand_dims(in_cols, 1)),
                                 "float32"), -1)  # fmt: skip
    return np.stack([backend.to_numpy(ops.sum(ops.abs(end - best) * m, axis=(1, 2))) for end in ends])


@pytest.mark.parametrize("shape", [(32, 32, 3), (8, 8, 2), (10, 7, 1)])
def test_window_sums_match_the_whole_image_mask(shape):
    rng, n, eps = np.random.default_rng(sum(shape)), 60, np.float32(0.1)
    h, w, _ = shape
    x0 = rng.uniform(0.0, 1.0, size=(n,) + shape).astype(np.float32)
    ends = [np.clip(x0 + eps, 0, 1), np.clip(x0 - eps, 0, 1)]  # clipped corners: some already equal
    best = np.where(rng.uniform(size=x0.shape) < 0.5, ends[0], ends[1])
    best[: n // 3] = ends[0][: n // 3]  # rows whose window is unchanged by the + corner
    best_t, ends_t = _tensor(best), [_tensor(e) for e in ends]
    for side in range(1, max(h, w) + 1):
        sh, sw = min(side, h), min(side, w)
        sides = backend.to_tensor(np.asarray([sh, sw], np.int32))
        u = _tensor(rng.uniform(size=(n, 2)))
        top, left = SQUARE._corners(u[:, 0], u[:, 1], sides[0], sides[1], h, w)
        new = backend.to_numpy(SQUARE.window_sums(best_t, ends_t, top, left, sides))
        old = _mask_sums(best_t, ends_t, u, sides, h, w)
        np.testing.assert_allclose(new, old, rtol=1e-6, atol=0)
        tolerance = np.float32(1e-7) * np.float32(sh * sw)
        np.testing.assert_array_equal(new < tolerance, old < tolerance)
        assert (old[0, : n // 3] == 0).all() and (old[1, : n // 3] > 0).any()  # both outcomes are tested
        empty = SQUARE.window_sums(best_t, ends_t, top, left, sides, backend.to_tensor(np.asarray(True)))
        assert not backend.to_numpy(empty).any()


def _square(shape, seed, p_init, x):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape), keras.layers.Flatten(), keras.layers.Dense(4)])
    y = np.argmax(model.predict(x, verbose=0), axis=1)
    return gradkit.square(model, x, y, eps=0.03, n_queries=120, p_init=p_init, seed=seed, clip_values=(0, 1))


@pytest.mark.parametrize("shape", [(16, 16, 3), (12, 9, 1)])
def test_square_linf_outputs_match_the_whole_image_formula(shape, monkeypatch):
    x = np.random.default_rng(0).uniform(0.2, 0.8, size=(40,) + shape).astype(np.float32)
    for seed, p_init in [(0, 0.8), (1, 0.3), (2, 0.05)]:
        patched = _square(shape, seed, p_init, x)
        with monkeypatch.context() as m:
            m.setattr(SQUARE, "PATCH_FRACTION", 1)  # a patch the image's size: the whole-image mask
            whole = _square(shape, seed, p_init, x)
        np.testing.assert_array_equal(patched, whole)
        assert not np.array_equal(patched, x)


@pytest.mark.parametrize("batch_size", [None, 7])
def test_a_bound_forward_gives_forward_and_traces_nothing_new(digits_mlp, batch_size):
    """`AttackGradient.bind` (Square's forward pass on fixed rows) equals `forward`, for a model and an
    ensemble, untargeted and targeted, batched or not, through the same compiled function."""
    from gradkit.gradients import AttackGradient

    model, x, y = digits_mlp
    x, y = x[:20], y[:20]
    targets = (y + 1) % 10
    for target in (model, gradkit.WeightedEnsemble([model, model], [0.7, 0.3])):
        for targeted, t in ((False, None), (True, targets)):
            objective = AttackGradient(target, loss="margin", targeted=targeted, batch_size=batch_size)
            values, logits = objective.forward(x, y if t is None else t)
            count = objective.trace_count
            bound = objective.bind(y if t is None else t)
            for scale in (1.0, 0.5):  # new inputs on the same rows
                got = bound(x * scale)
                expected = objective.forward(x * scale, y if t is None else t)
                np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
            assert got[0].dtype == np.float64 and got[1].shape == logits.shape
            assert objective.trace_count == count  # the bound call is the compiled forward
            if len(logits) == 1 and not targeted:  # the margin by hand: max_{j != y} z_j - z_y
                z = logits[0]
                other = np.where(np.eye(10, dtype=bool)[y], -np.inf, z).max(axis=1)
                np.testing.assert_allclose(values, other - z[np.arange(20), y], rtol=1e-5, atol=1e-5)


def test_square_with_its_bound_forward_equals_the_plain_forward(digits_mlp):
    """The numpy reference queries through `Frame.bind`; with the frame's plain `forward` it draws the
    same proposals and gives the same examples and query counts."""
    from gradkit.attacks._frame import Frame
    from oracles.square import square_core

    model, x, y = digits_mlp
    x, y = x[:60], y[:60]
    options = dict(eps=0.1, norm=np.inf, n_queries=80, p_init=0.8, clip_values=(0.0, 1.0))
    runs = []
    for bound in (True, False):
        session = Frame(model, x, y, loss="margin", clip_values=(0, 1), single_input="Square")
        runs.append(square_core(session.forward, session.x0, session.labels, rng=0,
                                bind=session.bind if bound else None, **options))  # fmt: skip
        runs[-1] += (session.n_forwards,)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    adv, success, used, forwards = runs[0]
    assert forwards == used.sum() and 0 < success.sum() < 60
    # gradkit.square runs on the attack engine (its own random stream): the same success rate
    options.pop("clip_values")
    with gradkit.attacks.recording() as session:
        adv = gradkit.square(model, x, y, seed=0, clip_values=(0, 1), **options)
    engine_success = session.success
    assert abs(engine_success.mean() - success.mean()) <= 0.15 and session.n_gradients == 0
    np.testing.assert_array_equal(engine_success, decide(model, adv) != y)


def test_square_l1_stays_in_the_ball_and_the_box(digits_cnn):
    model, x, y = digits_cnn
    x, y = x[:64], y[:64]
    adv = gradkit.square(model, x, y, eps=3.0, norm=1, n_queries=100, clip_values=(0, 1), seed=0)
    assert l1_sizes(adv, x).max() <= 3.0 and adv.min() >= 0 and adv.max() <= 1
    assert accuracy(model, adv, y) < accuracy(model, x, y) - 0.2


def _twin(layout, mixed=False):
    """Conv2D(4, 3) -> MaxPooling2D(2) -> GlobalAveragePooling2D -> Dense(3) on 8 x 8 RGB images, in
    `layout`; the same weights in either layout compute the same function of the same image."""
    inp = keras.Input((3, 8, 8) if layout == "channels_first" else (8, 8, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", data_format=layout)(inp)
    h = keras.layers.MaxPooling2D(2, data_format=layout)(h)
    pool = "channels_last" if mixed else layout  # a pooling layer at odds with the convolution
    h = keras.layers.GlobalAveragePooling2D(data_format=pool)(h)
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    rng = np.random.RandomState(0)
    model.set_weights([(rng.randn(*w.shape) * 0.5).astype("float32") for w in model.get_weights()])
    return model


@pytest.mark.parametrize("norm, eps", [(np.inf, 0.05), (2, 0.5), (1, 2.0)])
def test_a_channels_first_model_is_searched_as_its_channels_last_twin(norm, eps):
    """A channels_first model (input (3, 8, 8), the layout of models ported from PyTorch) and its
    channels_last twin with the same weights: the same seed gives the same examples up to the
    transpose, so the windows run over height and width (read as height 3, width 8 and 8 channels
    they would not). The two layouts' convolutions round apart by 5e-7, which can flip one keep
    decision of the search: one row of 16 may differ."""
    first, last = _twin("channels_first"), _twin("channels_last")
    x = np.random.default_rng(0).uniform(0.2, 0.8, (16, 3, 8, 8)).astype(np.float32)
    x_last = x.transpose(0, 2, 3, 1)
    y = keras.ops.convert_to_numpy(last(x_last)).argmax(axis=1)
    common = dict(eps=eps, norm=norm, n_queries=150, clip_values=(0, 1), seed=0)
    adv_first = gradkit.square(first, x, y, **common)
    adv_last = gradkit.square(last, x_last, y, **common)
    assert adv_first.shape == x.shape
    gap = np.abs(adv_first.transpose(0, 2, 3, 1) - adv_last).reshape(len(x), -1).max(axis=1)
    assert np.sum(gap > 1e-5) <= 1  # one row may part where the layouts' rounding (5e-7) flips a choice
    assert np.abs(adv_last - x_last).max() > eps / 10  # it moved


def test_linf_start_stripes_run_down_the_height_of_a_channels_first_image():
    """Square-Linf's start is vertical stripes, one sign per (column, channel): constant along the
    height axis, which is axis 2 of a channels_first batch (and the override reads the same)."""
    model = _twin("channels_first")
    x = np.random.default_rng(1).uniform(0.2, 0.8, (4, 3, 8, 8)).astype(np.float32)
    for data_format in (None, "channels_first"):
        delta = gradkit.square(model, x, eps=0.05, n_queries=1, seed=0, data_format=data_format) - x
        np.testing.assert_allclose(np.abs(delta), 0.05, rtol=1e-5)
        signs = np.sign(delta)
        assert np.array_equal(signs, np.broadcast_to(signs[:, :, :1, :], signs.shape))  # along h
        assert not np.array_equal(signs, np.broadcast_to(signs[:, :1], signs.shape))  # not along c


def test_the_layout_is_read_from_the_model_and_refused_where_it_cannot_be_told():
    from gradkit.attacks._frame import data_format

    assert data_format(_twin("channels_first")) == "channels_first"
    assert data_format(_twin("channels_last")) == "channels_last"
    dense = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    assert data_format(dense) == keras.config.image_data_format()
    ensemble = gradkit.WeightedEnsemble([_twin("channels_first"), _twin("channels_first")], [0.5, 0.5])
    assert data_format(ensemble) == "channels_first"
    mixed, x = _twin("channels_first", mixed=True), np.full((2, 3, 8, 8), 0.5, np.float32)
    assert data_format(mixed) is None
    with pytest.raises(ValueError, match=r"`data_format` must be given .* mix channels_first and channels_l"):
        gradkit.square(mixed, x, eps=0.05, n_queries=2)
    gradkit.square(mixed, x, eps=0.05, n_queries=2, data_format="channels_first")  # told: it runs
    with pytest.raises(ValueError, match="`data_format` must be one of"):
        gradkit.square(dense, x.transpose(0, 2, 3, 1), eps=0.05, n_queries=2, data_format="nchw")


def test_a_wrapped_torch_module_is_read_channels_first():
    """A `torch.nn.Module` in `keras.layers.TorchModuleWrapper` takes `(n, c, h, w)`, the layout of
    PyTorch's convolutions, whatever the global Keras setting."""
    if keras.backend.backend() != "torch":
        pytest.skip("TorchModuleWrapper runs on the PyTorch backend")
    import torch

    from gradkit.attacks._frame import data_format

    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)
    )
    inp = keras.Input((3, 8, 8))
    model = keras.Model(inp, keras.layers.TorchModuleWrapper(module, output_shape=(None, 3))(inp))
    assert data_format(model) == "channels_first"
