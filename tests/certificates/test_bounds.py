"""`gradkit.certificates` and `gradkit.output_bounds`: closed forms, a numpy oracle, soundness on samples."""

import keras
import numpy as np
import pytest
from keras import layers
from tests.oracles import bounds as oracle

from gradkit.certificates import certify, output_bounds


def _toy():
    """auto_LiRPA's toy network: z = [x1 - x2, 2 x1 - x2], ReLU, f = h1 - h2."""
    inp = keras.Input((2,))
    h = layers.Dense(2, activation="relu", use_bias=False)(inp)
    model = keras.Model(inp, layers.Dense(1, use_bias=False)(h))
    model.layers[1].set_weights([np.array([[1.0, 2.0], [-1.0, -1.0]])])
    model.layers[2].set_weights([np.array([[1.0], [-1.0]])])
    return model


@pytest.mark.parametrize("method, expected", [("ibp", (-6.0, 4.0)), ("crown", (-3.0, 3.0))])
def test_toy_network_bounds_are_the_papers_values(method, expected):
    x0 = np.array([[0.5, -0.5]], np.float32)  # the box x1 in [-1, 2], x2 in [-2, 1]
    low, high = output_bounds(_toy(), x0, 1.5, method=method)
    np.testing.assert_allclose([low[0, 0], high[0, 0]], expected, atol=1e-5)
    g = np.stack(np.meshgrid(np.linspace(-1, 2, 301), np.linspace(-2, 1, 301)), -1).reshape(-1, 2)
    z = np.maximum(g @ [[1, 2], [-1, -1]], 0) @ [1, -1]
    np.testing.assert_allclose([z.min(), z.max()], [-2.0, 1.0], atol=1e-9)  # the true range
    assert low[0, 0] <= z.min() and high[0, 0] >= z.max()


def _linear(n_classes=3, d=4, seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((d,)), layers.Dense(n_classes, activation="softmax")])
    rng = np.random.RandomState(seed)
    model.layers[0].set_weights([rng.randn(d, n_classes), rng.randn(n_classes)])
    return model, rng.rand(40, d).astype(np.float32)


@pytest.mark.parametrize("norm, dual", [("linf", 1), ("l2", 2)])
@pytest.mark.parametrize("method", ["ibp", "crown-ibp", "crown"])
def test_linear_model_certificate_is_the_exact_distance(norm, dual, method):
    model, x = _linear()
    w, b = (v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in model.layers[0].get_weights())
    z = x @ w + b
    y = np.argmax(z, axis=1)
    eps = 0.1
    cert = certify(model, x, y, eps, norm=norm, method=method)
    for i in range(len(x)):
        for j in range(3):
            if j == y[i]:
                assert cert.margins[i, j] == np.inf
                continue
            dw = w[:, y[i]] - w[:, j]
            exact = z[i, y[i]] - z[i, j] - eps * np.linalg.norm(dw, ord=dual)
            np.testing.assert_allclose(cert.margins[i, j], exact, rtol=1e-5, atol=1e-5)
    radius = np.min(
        [
            [
                (z[i, y[i]] - z[i, j]) / np.linalg.norm(w[:, y[i]] - w[:, j], ord=dual)
                for j in range(3)
                if j != y[i]
            ]
            for i in range(len(x))
        ],
        axis=1,
    )
    np.testing.assert_array_equal(cert.certified, radius > eps)  # certified = robust: the gap is zero
    assert repr(cert).startswith(f"Certificate(certified_accuracy={cert.certified_accuracy:.4f}, n=40")
    assert cert.certified_accuracy == pytest.approx(np.mean(radius > eps))


def _mlp(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((5,)),
            layers.Dense(8, activation="relu"),
            layers.Dense(6),
            layers.ReLU(),
            layers.Dense(3),
        ]
    )


def test_crown_and_ibp_equal_the_numpy_oracle():
    model = _mlp()
    weights = [tuple(np.asarray(v) for v in model.layers[k].get_weights()) for k in (0, 1, 3)]
    x = np.random.RandomState(2).rand(6, 5).astype(np.float32)
    eps = 0.05
    for method, reference in (("ibp", oracle.ibp), ("crown", oracle.crown)):
        low, high = output_bounds(model, x, eps, method=method)
        for i in range(len(x)):
            ref_low, ref_high = reference(weights, x[i].astype(np.float64), eps)
            np.testing.assert_allclose(low[i], ref_low, atol=1e-5)
            np.testing.assert_allclose(high[i], ref_high, atol=1e-5)


def _cnn(data_format="channels_last"):
    keras.utils.set_random_seed(3)
    shape = (6, 6, 2) if data_format == "channels_last" else (2, 6, 6)
    inp = keras.Input(shape)
    h = layers.Conv2D(4, 3, padding="same", activation="relu", data_format=data_format)(inp)
    skip = layers.Conv2D(4, 1, data_format=data_format)(inp)
    h = layers.Add()([layers.Conv2D(4, 3, padding="same", data_format=data_format)(h), skip])
    h = layers.BatchNormalization(axis=-1 if data_format == "channels_last" else 1)(h)
    h = layers.LeakyReLU(0.1)(h)
    h = layers.MaxPooling2D(2, data_format=data_format)(h)
    h = layers.AveragePooling2D(1, data_format=data_format)(h)
    h = layers.Flatten(data_format=data_format)(h)
    h = layers.Dropout(0.5)(h)
    out = layers.Dense(3, activation="softmax")(layers.Dense(8, activation="tanh")(h))
    model = keras.Model(inp, out)
    bn = model.layers[[type(v).__name__ for v in model.layers].index("BatchNormalization")]
    rng = np.random.RandomState(4)
    bn.set_weights([rng.rand(4) + 0.5, rng.randn(4) * 0.1, rng.randn(4) * 0.1, rng.rand(4) + 0.5])
    return model, shape


def _logits(model, x):
    cut = keras.Model(model.inputs, model.layers[-1].input)  # the softmax Dense, applied without it
    w, b = (np.asarray(v) for v in model.layers[-1].get_weights())
    return np.asarray(keras.ops.convert_to_numpy(cut(x, training=False))) @ w + b


def z_in(low, high, model, x, eps, clip, rng, draws=20):
    """Per draw, whether the logits of sampled points of the set (corners and inside) lie in the bounds."""
    out = []
    for k in range(draws):
        step = rng.uniform(-eps, eps, x.shape) if k % 2 else eps * np.sign(rng.randn(*x.shape))
        z = _logits(model, np.clip(x + step, *clip).astype(np.float32))
        out.append(bool(np.all(z >= low - 1e-4) and np.all(z <= high + 1e-4)))
    return out


def test_bounds_contain_sampled_logits_and_crown_sits_inside_ibp():
    model, shape = _cnn()
    rng = np.random.RandomState(5)
    x = rng.rand(4, *shape).astype(np.float32)
    eps, clip = 0.05, (0.0, 1.0)
    ibp_low, ibp_high = output_bounds(model, x, eps, method="ibp", clip_values=clip)
    mid_low, mid_high = output_bounds(model, x, eps, method="crown-ibp", clip_values=clip)
    low, high = output_bounds(model, x, eps, method="crown", clip_values=clip)
    assert np.all(mid_low >= ibp_low - 1e-5) and np.all(mid_high <= ibp_high + 1e-5)
    assert np.all(low >= ibp_low - 1e-5) and np.all(high <= ibp_high + 1e-5)
    assert np.all(z_in(mid_low, mid_high, model, x, eps, clip, rng))
    assert np.mean(high - low) < np.mean(ibp_high - ibp_low)
    for k in range(40):
        step = rng.uniform(-eps, eps, x.shape) if k % 2 else eps * np.sign(rng.randn(*x.shape))
        z = _logits(model, np.clip(x + step, *clip).astype(np.float32))
        assert np.all(z >= low - 1e-4) and np.all(z <= high + 1e-4)


def test_channels_first_twin_gives_the_same_bounds():
    last, shape = _cnn("channels_last")
    first, _ = _cnn("channels_first")
    first.set_weights(last.get_weights())
    x = np.random.RandomState(6).rand(3, *shape).astype(np.float32)
    for method in ("ibp", "crown"):
        a = output_bounds(last, x, 0.03, method=method, clip_values=(0, 1))
        b = output_bounds(first, np.transpose(x, (0, 3, 1, 2)), 0.03, method=method, clip_values=(0, 1))
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_certified_points_survive_the_attack():
    from gradkit import pgd

    model, _ = _linear(seed=3)
    x = np.random.RandomState(7).rand(30, 4).astype(np.float32)
    y = np.argmax(_logits(model, x), axis=1)
    cert = certify(model, x, y, 0.05, method="crown", clip_values=(0, 1))
    adv = pgd(model, x, y, eps=0.05, eps_step=0.01, steps=20, clip_values=(0, 1))
    robust = np.argmax(_logits(model, adv), axis=1) == y
    assert np.all(robust[cert.certified])


def test_a_layer_without_a_rule_is_named_before_any_work():
    inp = keras.Input((4,))
    model = keras.Model(inp, layers.Dense(2)(layers.LayerNormalization(name="ln")(inp)))
    with pytest.raises(ValueError, match=r"'ln' \(LayerNormalization\)"):
        certify(model, np.zeros((2, 4), np.float32), [0, 1], 0.1)
    gelu = keras.Sequential([keras.Input((4,)), layers.Dense(3, activation="gelu", name="g")])
    with pytest.raises(ValueError, match="'g'.*gelu"):
        certify(gelu, np.zeros((2, 4), np.float32), [0, 1], 0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"eps": -0.1}, "eps"),
        ({"method": "lp"}, "method"),
        ({"norm": "l1"}, "norm"),
        ({"clip_values": (1, 0)}, "clip_values"),
        ({"x": np.zeros((2, 3), np.float32)}, r"x.*\(n, 4\)"),
        ({"y": [0, 5]}, "y"),
        ({"x": np.full((2, 4), 2.0, np.float32), "clip_values": (0, 1)}, "inside clip_values"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    model, _ = _linear()
    args = {"x": np.zeros((2, 4), np.float32), "y": [0, 1], "eps": 0.1, **kwargs}
    with pytest.raises(ValueError, match=match):
        certify(model, args.pop("x"), args.pop("y"), args.pop("eps"), **args)


def test_one_logit_model_certifies_both_classes():
    model = keras.Sequential([keras.Input((2,)), layers.Dense(1, activation="sigmoid")])
    model.layers[0].set_weights([np.array([[1.0], [-1.0]]), np.zeros(1)])
    x = np.array([[0.6, 0.2], [0.2, 0.6], [0.5, 0.45]], np.float32)  # z = 0.4, -0.4, 0.05
    cert = certify(model, x, [1, 0, 1], 0.1)  # Linf: z moves by at most 0.2
    np.testing.assert_array_equal(cert.certified, [True, True, False])
    np.testing.assert_allclose(cert.margins[[0, 1, 2], [0, 1, 0]], [0.2, 0.2, -0.15], atol=1e-6)


def test_gradkit_certify_is_the_function_after_the_package_is_imported():
    import gradkit
    import gradkit.certificates  # noqa: F401 - the package's name is not the function's

    assert gradkit.smooth is gradkit.certificates.smooth
    assert callable(gradkit.certify) and gradkit.certify is certify


@pytest.mark.parametrize("pool", [dict(pool_size=3, strides=1, padding="same"), dict(pool_size=3, strides=2)])
def test_overlapping_max_pools_are_bounded_soundly(pool):
    keras.utils.set_random_seed(8)
    inp = keras.Input((5, 5, 2))
    h = layers.MaxPooling2D(**pool)(layers.Conv2D(3, 3, padding="same", activation="relu")(inp))
    model = keras.Model(inp, layers.Dense(3)(layers.Flatten()(h)))
    rng = np.random.RandomState(9)
    x = rng.rand(4, 5, 5, 2).astype(np.float32)
    ibp_low, ibp_high = output_bounds(model, x, 0.05, method="ibp", clip_values=(0, 1))
    low, high = output_bounds(model, x, 0.05, method="crown", clip_values=(0, 1))
    assert np.all(low >= ibp_low - 1e-5) and np.all(high <= ibp_high + 1e-5)
    for k in range(30):
        step = rng.uniform(-0.05, 0.05, x.shape) if k % 2 else 0.05 * np.sign(rng.randn(*x.shape))
        z = np.asarray(keras.ops.convert_to_numpy(model(np.clip(x + step, 0, 1).astype(np.float32))))
        assert np.all(z >= low - 1e-4) and np.all(z <= high + 1e-4)
