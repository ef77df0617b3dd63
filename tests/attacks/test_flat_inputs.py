"""Models of several inputs (`gradkit.attacks._inputs`): an image + metadata model attacked on the image
alone, by every attack and by `evaluate`; the robust accuracy of the image-only sub-problem of a linear
model by hand; list and dict inputs alike; per-input eps and clip values; bad names."""

import keras
import numpy as np
import pytest

import gradkit

RNG = np.random.default_rng(0)
N = 16
IMAGE = RNG.uniform(0.3, 0.7, (N, 3, 3, 1)).astype(np.float32)
META = RNG.uniform(0.3, 0.7, (N, 4)).astype(np.float32)
W_IMAGE = RNG.standard_normal((9, 2)).astype(np.float32)
W_META = RNG.standard_normal((4, 2)).astype(np.float32)


def image_and_metadata():
    """logits = flatten(image) @ W_IMAGE + meta @ W_META + b: two classes, linear."""
    image, meta = keras.Input((3, 3, 1), name="image"), keras.Input((4,), name="meta")
    joined = keras.layers.Concatenate()([keras.layers.Flatten()(image), meta])
    model = keras.Model({"image": image, "meta": meta}, keras.layers.Dense(2)(joined))
    bias = -np.median(
        IMAGE.reshape(N, -1) @ (W_IMAGE[:, 1] - W_IMAGE[:, 0]) + META @ (W_META[:, 1] - W_META[:, 0])
    )
    model.set_weights([np.concatenate([W_IMAGE, W_META]), np.array([0.0, bias], np.float32)])
    return model, bias


def margins(bias):
    """|z_1 - z_0| per point, and the image's L1 weight: the point resists every Linf change of the image
    of size eps (box inactive) iff margin > eps * ||w_image||_1 (Hoelder)."""
    a = IMAGE.reshape(N, -1) @ (W_IMAGE[:, 1] - W_IMAGE[:, 0]) + META @ (W_META[:, 1] - W_META[:, 0]) + bias
    return np.abs(a), np.abs(W_IMAGE[:, 1] - W_IMAGE[:, 0]).sum()


ATTACKS = {
    "pgd": lambda m, x, y, **k: gradkit.pgd(m, x, y, eps=0.05, eps_step=0.02, steps=5, seed=0, **k),
    "apgd": lambda m, x, y, **k: gradkit.apgd(m, x, y, eps=0.05, steps=5, seed=0, **k),
    "square": lambda m, x, y, **k: gradkit.square(m, x, y, eps=0.05, n_queries=20, seed=0, **k),
    "fab": lambda m, x, y, **k: gradkit.fab(m, x, y, steps=5, seed=0, **k),
    "fmn": lambda m, x, y, **k: gradkit.fmn(m, x, y, norm=np.inf, steps=10, **k),
    "ddn": lambda m, x, y, **k: gradkit.ddn(m, x, y, steps=10, seed=0, **k),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_changes_only_the_attacked_input_and_list_and_dict_agree(name):
    model, _ = image_and_metadata()
    y = np.asarray(model.predict({"image": IMAGE, "meta": META}, verbose=0)).argmax(1)
    options = dict(attack_inputs=["image"], clip_values={"image": (0.0, 1.0)})
    by_name = ATTACKS[name](model, {"image": IMAGE, "meta": META}, y, **options)
    by_order = ATTACKS[name](model, [IMAGE, META], y, **options)
    np.testing.assert_array_equal(by_name["meta"], META)  # held fixed, bit for bit
    np.testing.assert_array_equal(by_name["image"], by_order[0])
    np.testing.assert_array_equal(by_order[1], META)
    assert by_name["image"].shape == IMAGE.shape and (by_name["image"] != IMAGE).any()
    assert (by_name["image"] >= 0).all() and (by_name["image"] <= 1).all()


def test_evaluate_holding_the_metadata_fixed_is_the_image_only_problem_by_hand():
    model, bias = image_and_metadata()
    y = np.asarray(model.predict({"image": IMAGE, "meta": META}, verbose=0)).argmax(1)
    margin, weight = margins(bias)
    eps = float(np.median(margin) / weight)
    keep = np.abs(margin / (eps * weight) - 1) > 0.02  # no point within 2% of the threshold
    x = {"image": IMAGE[keep], "meta": META[keep]}
    options = dict(eps=eps, attacks=["apgd-ce"], steps=20, attack_inputs=["image"], verbose=0)
    by_name = gradkit.evaluate(model, x, y[keep], clip_values={"image": (0.0, 1.0)}, **options)
    np.testing.assert_array_equal(by_name.robust, margin[keep] > eps * weight)
    assert by_name.robust_accuracy == pytest.approx(np.mean(margin[keep] > eps * weight))
    np.testing.assert_array_equal(by_name.x_adv["meta"], META[keep])
    by_order = gradkit.evaluate(model, [IMAGE[keep], META[keep]], y[keep], clip_values=(0.0, 1.0), **options)
    np.testing.assert_array_equal(by_order.robust, by_name.robust)
    np.testing.assert_array_equal(by_order.x_adv[0], by_name.x_adv["image"])


def test_per_input_eps_bounds_each_input_by_its_own_budget():
    model, _ = image_and_metadata()
    x = {"image": IMAGE, "meta": META}
    x_adv = gradkit.fgsm(model, x, None, eps={"image": 0.02, "meta": 0.1})
    image, meta = np.abs(x_adv["image"] - IMAGE), np.abs(x_adv["meta"] - META)
    np.testing.assert_allclose(image[image > 0], 0.02, rtol=1e-4)  # FGSM moves each feature by its eps
    np.testing.assert_allclose(meta[meta > 0], 0.1, rtol=1e-4)
    with pytest.raises(ValueError, match="a dict of per-input eps needs norm=np.inf"):
        gradkit.fgsm(model, x, None, eps={"image": 0.02}, norm=2)


def test_unknown_input_names_and_names_without_several_inputs_are_refused():
    model, _ = image_and_metadata()
    x = {"image": IMAGE, "meta": META}
    with pytest.raises(ValueError, match=r"`attack_inputs` must be a list of the model's input names"):
        gradkit.apgd(model, x, None, eps=0.1, attack_inputs=["label"])
    with pytest.raises(ValueError, match=r"`mask\['meta'\]` must broadcast to that input's shape \(4,\)"):
        gradkit.pgd(model, x, None, eps=0.1, eps_step=0.1, steps=1, mask={"meta": np.ones(3)})
    with pytest.raises(ValueError, match="`attack_inputs` names inputs of a model of several inputs"):
        gradkit.apgd(
            keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]),
            META,
            None,
            eps=0.1,
            attack_inputs=["x"],
        )
