"""Cost of an adversarially trained epoch: PGD-7 in the training step vs a plain epoch, and vs ART.

An MLP (784-256-10) on N random 28x28 "images" in [0, 1], batch BATCH, Linf eps 0.1, 7 steps of 0.025
with a random start. Each candidate is one `fit` epoch after a warm-up epoch (tracing and compilation
outside the timing); the candidates alternate, REPEATS rounds, and the medians are reported.

- plain_s: `fit` without adversarial training.
- pgd7_s: `fit` after `gradkit.training.adversarial_training(model, eps=0.1, steps=7)`.
- ratio: pgd7_s / plain_s. The bare cost of 7 extra forward-backward passes is 8x a plain epoch; the
  issue's target is at most 1.2 * 8 = 9.6.
- art_s (TensorFlow only): ART's `AdversarialTrainerMadryPGD` (`TensorFlowV2Classifier` over the same
  Keras 3 model, same eps, step, steps, batch), one epoch; speedup = art_s / pgd7_s. ART attacks each
  batch outside the training step (numpy round trips), then trains on it. If ART cannot wrap a Keras 3
  model, art_error records why.

Section "adversarial_training" of results.json.

    KERAS_BACKEND=tensorflow python benchmarks/bench_training.py

Settings: BENCH_TRAINING_N (4096), BENCH_TRAINING_BATCH (128), BENCH_TRAINING_REPEATS (3).
"""

import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from gradkit.training import adversarial_training  # noqa: E402

from common import alternating, merge  # noqa: E402

N = int(os.environ.get("BENCH_TRAINING_N", 4096))
BATCH = int(os.environ.get("BENCH_TRAINING_BATCH", 128))
REPEATS = int(os.environ.get("BENCH_TRAINING_REPEATS", 3))
EPS, STEP, STEPS = 0.1, 0.025, 7


def model():
    keras.utils.set_random_seed(0)
    net = keras.Sequential(
        [
            keras.Input((28, 28)),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    net.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return net


def art_epoch(x, y):
    """One epoch of ART's AdversarialTrainerMadryPGD on a Keras 3 model (TensorFlow), as a callable."""
    import tensorflow as tf
    from art.defences.trainer import AdversarialTrainerMadryPGD
    from art.estimators.classification import TensorFlowV2Classifier

    net = model()
    classifier = TensorFlowV2Classifier(
        model=net,
        nb_classes=10,
        input_shape=(28, 28),
        loss_object=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(0.01),
        clip_values=(0.0, 1.0),
    )
    trainer = AdversarialTrainerMadryPGD(
        classifier, nb_epochs=1, batch_size=BATCH, eps=EPS, eps_step=STEP, max_iter=STEPS, num_random_init=1
    )
    return lambda: trainer.fit(x, y)


def main():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (N, 28, 28)).astype("float32")
    y = rng.integers(0, 10, N)
    plain, adv = model(), model()
    adversarial_training(adv, eps=EPS, eps_step=STEP, steps=STEPS, clip_values=(0.0, 1.0), seed=0)
    fns = {
        "plain_s": lambda: plain.fit(x, y, batch_size=BATCH, epochs=1, verbose=0),
        "pgd7_s": lambda: adv.fit(x, y, batch_size=BATCH, epochs=1, verbose=0),
    }
    section = {"n": N, "batch": BATCH, "eps": EPS, "eps_step": STEP, "steps": STEPS}
    if keras.backend.backend() == "tensorflow":
        try:
            fns["art_s"] = art_epoch(x, y)
        except Exception as error:  # noqa: BLE001 - recorded, the rest of the benchmark still runs
            section["art_error"] = f"{type(error).__name__}: {error}"
    for name, fn in list(fns.items()):
        try:
            fn()  # warm-up: traces and compiles
        except Exception as error:  # noqa: BLE001
            section[name.replace("_s", "_error")] = f"{type(error).__name__}: {error}"[:300]
            del fns[name]
    times = alternating(fns, repeats=REPEATS)
    section.update(times)
    section["ratio"] = times["pgd7_s"] / times["plain_s"]
    section["target_ratio"] = 1.2 * (1 + STEPS)
    if "art_s" in times:
        section["speedup_vs_art"] = times["art_s"] / times["pgd7_s"]
    merge({"adversarial_training": section})


if __name__ == "__main__":
    main()
