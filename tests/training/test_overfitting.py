"""`CatastrophicOverfittingCheck` and `collapsed` (`gradkit.training._overfitting`): PGD and FGSM
accuracy on a held batch once per epoch, the collapse they reveal, the warning, and the check's own
input refused before the first epoch."""

import keras
import numpy as np
import pytest

import gradkit
from gradkit.training import CatastrophicOverfittingCheck, adversarial_training, collapsed
from helpers.binary import binary_model, diagonal_data, hand_accuracy

CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_the_collapse_detector_on_fed_values():
    assert collapsed([0.4, 0.45, 0.02], 0.9)
    assert not collapsed([0.4, 0.45, 0.40], 0.9)  # no drop
    assert not collapsed([0.4, 0.45, 0.02], 0.2)  # FGSM collapsed too: no masking
    assert collapsed([0.02], 0.9)  # never robust while FGSM accuracy rose: masked from the start
    assert not collapsed([0.2], 0.4)  # neither a drop nor a collapse to the floor


def test_fgsm_without_random_start_overfits_catastrophically_and_the_check_warns():
    """Built to trigger it: digits, a large eps (0.5 of the [0, 1] range), FGSM with step eps from the clean
    point. FGSM accuracy on the held batch climbs while PGD accuracy stays at zero (the one-step
    gradient is masked; Wong, Rice & Kolter 2020). Measured: the warning from epoch 4-6 on each backend."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    x, y = (digits.data[order] / 16.0).astype("float32"), digits.target[order]
    keras.utils.set_random_seed(0)
    hidden = [keras.layers.Dense(128, activation="relu") for _ in range(2)]
    model = keras.Sequential([keras.Input((64,)), *hidden, keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(3e-3), CE)
    adversarial_training(model, "fgsm", eps=0.5, random_start=False, clip_values=(0, 1), seed=0)
    check = CatastrophicOverfittingCheck(x[-128:], y[-128:], eps=0.5, steps=5, clip_values=(0, 1))
    with pytest.warns(RuntimeWarning, match="Catastrophic overfitting"):
        history = model.fit(x[:-128], y[:-128], batch_size=64, epochs=8, verbose=0, callbacks=[check]).history
    assert history["adv_accuracy"] == check.pgd_accuracies and len(check.pgd_accuracies) == 8
    assert check.warned_epochs and max(check.pgd_accuracies) <= 0.05
    assert check.fgsm_accuracies[-1] >= 0.3


@pytest.mark.parametrize("head", ["sigmoid", "logit", "softmax"])
def test_overfitting_check_on_a_one_unit_head_reads_a_threshold(head):
    x, y = diagonal_data()
    model = binary_model(head)
    targets = y if head == "softmax" else y[:, None].astype("float32")
    for eps in (0.0, 0.1):
        check = gradkit.CatastrophicOverfittingCheck(x, y, eps=eps)
        model.fit(x, targets, epochs=1, batch_size=120, verbose=0, callbacks=[check])
        assert check.pgd_accuracies == [hand_accuracy(x, eps)]
        assert check.fgsm_accuracies == [hand_accuracy(x, eps)]
    assert hand_accuracy(x, 0.0) == 1.0


def test_overfitting_check_refuses_bad_data_before_the_first_epoch():
    x, y = diagonal_data()
    model = binary_model("logit")
    check = gradkit.CatastrophicOverfittingCheck(x, y, eps=0.1, clip_values=(0.5, 1.0))
    epochs = []
    callbacks = [check, keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: epochs.append(e))]
    with pytest.raises(ValueError, match="clip_values"):
        model.fit(x, y[:, None].astype("float32"), epochs=1, verbose=0, callbacks=callbacks)
    assert epochs == []
