"""`gradkit evaluate MODEL FOLDER`: a folder of class sub-folders of PNGs (written here with
`keras.utils.save_img`) gives the samples.csv and results of the same images in a .npz, at several eps,
and resumes from its state."""

import json

import keras
import numpy as np

from gradkit.cli import _images
from helpers.cli import run_evaluate, samples

CLASSES = ("cat", "dog", "emu")  # sorted: ids 0, 1, 2


def images_and_model(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(21, 4, 4, 3)).astype("uint8")
    labels = np.repeat(np.arange(3), 7)
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = tmp_path / "images" / CLASSES[label]
        folder.mkdir(parents=True, exist_ok=True)
        keras.utils.save_img(folder / f"{i:03d}.png", image, scale=False)
    np.savez(tmp_path / "same.npz", x=images.astype("float32"), y=labels)
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    kernel = rng.normal(size=(48, 3)).astype("float32") / 255.0
    kernel[:, 0] += 0.0005  # a model that predicts class 0 more often than the others
    model.set_weights([kernel, np.zeros(3, "float32")])
    model.save(tmp_path / "m.keras")
    return images, labels


def test_a_folder_of_pngs_gives_the_result_of_the_same_images_in_a_npz(capsys, tmp_path):
    images, labels = images_and_model(tmp_path)
    folder = _images.image_folder(tmp_path / "images", (4, 4), batch=8)
    assert folder.class_names == list(CLASSES) and folder.input_shape == (4, 4, 3)
    x, y = map(np.concatenate, zip(*folder))
    np.testing.assert_array_equal(x, images.astype("float32"))  # PNG is lossless, no resize at 4x4
    np.testing.assert_array_equal(y, labels)
    common = [str(tmp_path / "m.keras"), "--eps", "8,64", "--attacks", "fgsm,pgd", "--steps", "3"]
    common += ["--batch-size", "8", "--clip-values", "0,255", "--no-progress"]
    args = [*common, "--image-size", "4,4"]
    code, out = run_evaluate(
        capsys, args[0], str(tmp_path / "images"), *args[1:], "--out", str(tmp_path / "f")
    )
    assert code == 0 and "resumed" not in out.err
    assert (
        run_evaluate(
            capsys, common[0], str(tmp_path / "same.npz"), *common[1:], "--out", str(tmp_path / "n")
        )[0]
        == 0
    )
    assert samples(tmp_path / "f") == samples(tmp_path / "n")
    assert {"clean", "fgsm"} <= {r["broken_by"] for r in samples(tmp_path / "n")}
    assert {r["broken_at_eps"] for r in samples(tmp_path / "n")} == {"0.0", "8.0", "64.0"}
    got, expected = (json.loads((tmp_path / d / "evaluation.json").read_text()) for d in ("f", "n"))
    for key in ("clean_accuracy", "robust_accuracy", "epsilons", "data", "scale"):
        assert got[key] == expected[key], key
    code, out = run_evaluate(
        capsys, args[0], str(tmp_path / "images"), *args[1:], "--out", str(tmp_path / "f")
    )
    assert code == 0 and "resumed from" in out.err and "3 blocks of the stream done" in out.err
    assert samples(tmp_path / "f") == samples(tmp_path / "n")


def test_a_folder_needs_its_image_size_and_images(capsys, tmp_path):
    images_and_model(tmp_path)
    code, out = run_evaluate(capsys, str(tmp_path / "m.keras"), str(tmp_path / "images"), "--eps", "4")
    assert code == 2 and "`--image-size` must be H,W" in out.err
    (tmp_path / "empty" / "a").mkdir(parents=True)
    code, out = run_evaluate(
        capsys, str(tmp_path / "m.keras"), str(tmp_path / "empty"), "--eps", "4", "--image-size", "4,4"
    )
    assert code == 2 and "must hold class sub-folders of images" in out.err
    sharded = [str(tmp_path / "m.keras"), str(tmp_path / "images"), "--eps", "4", "--image-size", "4,4"]
    code, out = run_evaluate(capsys, *sharded, "--shard", "1/2")
    assert code == 2 and "a folder of images is evaluated in one process" in out.err
