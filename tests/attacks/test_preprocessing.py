"""Pixel space over a normalized model (`preprocessing=`; `gradkit.gradients.preprocessed`): an attack in
pixels at eps equals the attack on the normalized model at eps / std, the closed form of a linear model
under a per-channel normalization, a Keras preprocessing stack (Resizing, Rescaling, Normalization) in
front of a random CNN, ensembles, `evaluate`, `certify`, the command line, bad input."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.attacks import recording
from gradkit.gradients import preprocessed
from helpers import models
from helpers.cli import run_evaluate, samples

MEAN, STD = 0.4, 0.25  # scalar: the normalized box is ((0 - MEAN) / STD, (1 - MEAN) / STD)
ATTACKS = {
    "fgsm": dict(eps=0.05),
    "pgd": dict(eps=0.05, eps_step=0.02, steps=4, seed=3),
    "apgd": dict(eps=0.05, steps=6, seed=1),
    "square": dict(eps=0.05, n_queries=20, seed=0),
}  # FAB: the linear closed form below


def _normalized(kwargs):
    """The same attack's arguments in the normalized model's units."""
    scaled = {k: v / STD if k in ("eps", "eps_step") else v for k, v in kwargs.items()}
    return dict(scaled, clip_values=((0 - MEAN) / STD, (1 - MEAN) / STD))


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_in_pixels_is_the_attack_on_the_normalized_model_at_eps_over_std(name):
    model = models.small_cnn()
    x, y = models.random_images(6)
    attack = getattr(gradkit, name)
    pixels = attack(model, x, y, clip_values=(0, 1), preprocessing=(MEAN, STD), **ATTACKS[name])
    normalized = attack(model, (x - MEAN) / STD, y, **_normalized(ATTACKS[name]))
    np.testing.assert_allclose(pixels, normalized * STD + MEAN, rtol=0, atol=1e-6)
    assert pixels.min() >= 0 and pixels.max() <= 1 and np.abs(pixels - x).max() > 0.01


def _two_channel_linear():
    """(2,) features -> Dense(2) logits: z = W^T u + b with u = (x - mean) / std per feature."""
    return models.linear([[1.0, -2.0], [3.0, 0.5]], [0.2, -0.1])


def test_a_per_channel_normalization_gives_the_linear_closed_forms_in_pixels():
    model, mean, std = _two_channel_linear(), np.array([0.5, 0.2], "float32"), np.array([0.1, 0.4], "float32")
    x = np.array([[0.55, 0.3], [0.4, 0.1], [0.6, 0.5]], "float32")
    w, b = (np.asarray(v, np.float64) for v in model.get_weights())
    z = ((x - mean) / std) @ w + b
    y = z.argmax(axis=1)
    # d(z_other - z_y)/dx_i = (w_i,other - w_i,y) / std_i: FGSM moves each pixel eps along its sign
    gap = (w[:, 1 - y] - w[:, y]).T / std
    x_adv = gradkit.fgsm(model, x, y, eps=0.01, preprocessing=(mean, std))
    np.testing.assert_allclose(x_adv, x + 0.01 * np.sign(gap), rtol=0, atol=1e-6)
    # the smallest Linf change in pixels: the margin over sum_i |w_i,y - w_i,other| / std_i (no box),
    # which FGSM reaches exactly on a linear model (just above it flips the class, just below never)
    margin = z[np.arange(3), y] - z[np.arange(3), 1 - y]
    smallest = margin / np.abs(gap).sum(axis=1)
    for i, d in enumerate(smallest):
        for scale, flipped in ((0.999, False), (1.001, True)):
            adv = gradkit.fgsm(model, x[i : i + 1], y[i : i + 1], eps=scale * d, preprocessing=(mean, std))
            assert (gradkit.attacks.decide(preprocessed(model, (mean, std)), adv)[0] != y[i]) == flipped
    with recording() as record:  # FAB's search never goes below it, and ends within its overshoot
        gradkit.fab(model, x, y, steps=10, preprocessing=(mean, std))
    assert np.all(record.norms >= smallest * (1 - 1e-5)) and np.all(record.norms <= 1.05 * smallest)


def _stack(mean, variance):
    return keras.Sequential(
        [
            keras.layers.Resizing(6, 6),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Normalization(mean=mean, variance=variance),
        ]
    )


def test_a_keras_preprocessing_stack_outside_a_random_cnn_attacks_raw_pixels():
    cnn = models.small_cnn()
    stack = _stack([0.5, 0.4], [0.09, 0.04])
    x = np.random.RandomState(1).uniform(0, 255, (5, 12, 12, 2)).astype("float32")
    composed = keras.Sequential([keras.Input((12, 12, 2)), stack, cnn])  # the same layers, one model
    y = composed.predict(x, verbose=0).argmax(axis=1)
    kwargs = dict(eps=8.0, eps_step=2.0, steps=3, seed=0, clip_values=(0, 255))
    outside = gradkit.pgd(cnn, x, y, preprocessing=stack, **kwargs)
    np.testing.assert_allclose(outside, gradkit.pgd(composed, x, y, **kwargs), rtol=0, atol=1e-4)
    assert outside.shape == x.shape and 0 <= outside.min() and outside.max() <= 255
    assert 7.9 < np.abs(outside - x).max() <= 8.0 + 1e-4


def test_the_wrapper_is_built_once_and_compiled_once_per_model_and_preprocessing():
    model = models.small_cnn()
    x, y = models.random_images(4)
    wrapper = preprocessed(model, (MEAN, STD))
    assert preprocessed(model, (np.float32(MEAN), np.float64(STD))) is wrapper  # equal values
    assert preprocessed(model, (MEAN, 0.5)) is not wrapper and preprocessed(model, None) is model
    counts = []
    for eps in (0.01, 0.02):
        with recording() as record:
            gradkit.apgd(model, x, y, eps=eps, steps=3, preprocessing=(MEAN, STD))
        counts.append(record.frame.objective.trace_count)
        assert record.frame.owner is wrapper
    assert counts[0] == counts[1] > 0


def test_an_ensemble_is_attacked_through_its_preprocessed_members():
    ensemble = gradkit.WeightedEnsemble([models.small_cnn(0), models.small_cnn(1)], [0.7, 0.3])
    x, y = models.random_images(6)
    pixels = gradkit.fgsm(ensemble, x, y, eps=0.05, clip_values=(0, 1), preprocessing=(MEAN, STD))
    normalized = gradkit.fgsm(ensemble, (x - MEAN) / STD, y, **_normalized(dict(eps=0.05)))
    np.testing.assert_allclose(pixels, normalized * STD + MEAN, rtol=0, atol=1e-6)
    wrapped = preprocessed(ensemble, (MEAN, STD))
    assert wrapped.weights == ensemble.weights and len(wrapped.models) == 2


def test_evaluate_and_certify_in_pixels_match_the_normalized_model():
    model = models.small_cnn()
    x, y = models.random_images(8)
    options = dict(attacks=["apgd-ce"], steps=5, verbose=0, certify="ibp")
    pixels = gradkit.evaluate(model, x, y, eps=0.02, clip_values=(0, 1), preprocessing=(MEAN, STD), **options)
    normalized = gradkit.evaluate(model, (x - MEAN) / STD, y, **_normalized(dict(eps=0.02)), **options)
    assert pixels.clean_accuracy == normalized.clean_accuracy
    np.testing.assert_array_equal(pixels.robust, normalized.robust)
    np.testing.assert_array_equal(pixels.certified, normalized.certified)
    np.testing.assert_allclose(pixels.x_adv, normalized.x_adv * STD + MEAN, rtol=0, atol=1e-6)


def test_a_robustness_curve_in_pixels_judges_the_points_in_pixels():
    model = models.small_cnn()
    x, y = models.random_images(12)
    kwargs = dict(attack="fgsm", clip_values=(0, 1))
    pixels = gradkit.robustness_curve(
        model, x, y, epsilons=[0.0, 0.05, 0.2], preprocessing=(MEAN, STD), **kwargs
    )
    kwargs["clip_values"] = _normalized({})["clip_values"]
    normalized = gradkit.robustness_curve(model, (x - MEAN) / STD, y, epsilons=[0.0, 0.2, 0.8], **kwargs)
    assert pixels["accuracy"] == normalized["accuracy"] and pixels["accuracy"][0] > pixels["accuracy"][-1]


def test_certify_folds_a_per_channel_normalization_as_a_normalization_layer_would():
    cnn = models.small_cnn()
    mean, std = np.array([0.5, 0.3], "float32"), np.array([0.2, 0.4], "float32")
    flat = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Normalization(mean=mean, variance=std**2)])
    for layer in cnn.layers:
        flat.add(layer)
    x, y = models.random_images(6)
    for method in ("ibp", "crown"):
        folded = gradkit.certify(
            cnn, x, y, 0.01, method=method, clip_values=(0, 1), preprocessing=(mean, std)
        )
        reference = gradkit.certify(flat, x, y, 0.01, method=method, clip_values=(0, 1))
        np.testing.assert_allclose(folded.margins, reference.margins, rtol=1e-4, atol=1e-4)
        assert np.isfinite(folded.margins[folded.margins < np.inf]).all()


def test_bad_preprocessing_is_refused_naming_the_argument():
    model = models.small_cnn()
    x, y = models.random_images(2)
    with pytest.raises(ValueError, match=r"`preprocessing` must be a pair \(mean, std\) with std > 0"):
        gradkit.fgsm(model, x, y, eps=0.1, preprocessing=(0.5, 0.0))
    with pytest.raises(TypeError, match="`preprocessing` must be None, a pair"):
        gradkit.fgsm(model, x, y, eps=0.1, preprocessing="imagenet")
    with pytest.raises(ValueError, match="broadcastable to the input shape"):
        gradkit.fgsm(model, x, y, eps=0.1, preprocessing=([0.1, 0.2, 0.3], 1.0))
    with pytest.raises(ValueError, match="a callable cannot be folded"):
        gradkit.certify(model, x, y, 0.1, preprocessing=keras.layers.Rescaling(0.5))
    with pytest.raises(ValueError, match="one std for an L2 ball"):
        gradkit.certify(model, x, y, 0.1, norm="l2", preprocessing=(0.0, [0.2, 0.4]))


def test_the_command_line_takes_mean_and_std_per_channel(capsys, tmp_path):
    model = models.small_cnn()
    x, y = models.random_images(8)
    model.save(tmp_path / "model.keras")
    np.savez(tmp_path / "test.npz", x_test=x, y_test=y)
    common = [str(tmp_path / "model.keras"), str(tmp_path / "test.npz"), "--eps", "0.02", "--steps", "3"]
    common += ["--attacks", "apgd-ce", "--no-progress"]
    code, _ = run_evaluate(capsys, *common, "--preprocess", "0.5,0.3/0.2,0.4", "--out", str(tmp_path / "a"))
    assert code == 0
    options = dict(steps=3, attacks=["apgd-ce"], clip_values=(0, 1), verbose=0, batch_size=256)
    direct = gradkit.evaluate(model, x, y, eps=0.02, preprocessing=([0.5, 0.3], [0.2, 0.4]), **options)
    robust = [row["robust"] in ("True", "1", "true") for row in samples(tmp_path / "a")]
    np.testing.assert_array_equal(robust, direct.robust)
    code, seen = run_evaluate(capsys, *common, "--preprocess", "0.5,0.3/0", "--out", str(tmp_path / "b"))
    assert code == 2 and "`--preprocess` must be MEAN/STD" in seen.err and "std > 0" in seen.err


def test_the_command_line_puts_per_channel_values_on_the_channel_axis():
    from gradkit.cli._evaluate import _preprocessing

    images = np.zeros((2, 3, 5, 5), "float32")
    mean, std = _preprocessing(([0.1, 0.2, 0.3], [0.5]), images, "mynet:build")  # channels first
    assert mean.shape == (3, 1, 1) and std.shape == (1, 1, 1) and mean[2, 0, 0] == np.float32(0.3)
    mean, std = _preprocessing(([0.1, 0.2, 0.3], [0.5]), images, None)  # the last axis
    assert mean.shape == (3,) and std.shape == (1,)
    assert _preprocessing(None, images, None) is None


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__(name="subclassed")  # TensorFlow's scope names take no leading underscore
        self.dense = keras.layers.Dense(2)

    def call(self, x):
        return self.dense(x)


def test_a_subclassed_model_takes_a_callable_at_the_data_shape():
    model = _Subclassed()
    model(np.zeros((1, 2), "float32"))
    model.set_weights([np.array([[1.0, -1.0], [2.0, 0.5]], "float32"), np.zeros(2, "float32")])
    x = np.array([[100.0, 50.0], [20.0, 200.0]], "float32")
    y = np.array([0, 1])
    x_adv = gradkit.fgsm(model, x, y, eps=5.0, preprocessing=keras.layers.Rescaling(1 / 255))
    # d(z_other - z_y)/dx = (w_other - w_y) / 255: every pixel moves 5 along its sign
    w = model.get_weights()[0]
    np.testing.assert_allclose(x_adv, x + 5.0 * np.sign((w[:, 1 - y] - w[:, y]).T), rtol=0, atol=1e-4)
