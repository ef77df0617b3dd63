"""`gradkit.boosting.describe`: an ensemble that is one network, and a member whose gradient dominates."""

import keras
import numpy as np

from gradkit.boosting import SAMME, describe
from gradkit.boosting._describe import outvoted


def test_outvoted_members_follow_from_the_weights_alone():
    assert outvoted([3.0, 1.0, 1.0]) == [1, 2]  # 3 > 1 + 1: member 0's vote is the vote
    assert outvoted([2.0, 1.0, 1.0]) == []  # 2 = 1 + 1: the others together can tie it
    assert outvoted([0.5, 2.0]) == [0]
    assert outvoted([1.0]) == []


def test_describe_a_fitted_samme_on_blobs():
    rng = np.random.RandomState(0)
    x = np.concatenate([rng.randn(60, 2) - 1.5, rng.randn(60, 2) + 1.5]).astype("float32")
    y = np.repeat([0, 1], 60)

    def build():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
        model.compile(keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
        return model

    booster = SAMME(build, n_estimators=3, fit_kwargs={"epochs": 5, "verbose": 0}, random_state=0, verbose=0)
    booster.fit(x, y)
    info = describe(booster, x[:20], y[:20])
    assert info["members"] == len(booster.estimators_) and info["n_estimators"] == 3
    np.testing.assert_allclose(info["estimator_weights"], booster.estimator_weights_)
    assert info["outvoted_members"] == outvoted(booster.estimator_weights_)
    if info["members"] > 1:
        assert len(info["gradient_shares"]) == info["members"]
        assert 0.999 <= np.sum(info["gradient_shares"]) or max(info["gradient_shares"]) <= 1
    assert (len(info["warnings"]) > 0) == bool(
        info["outvoted_members"] or max(info.get("gradient_shares", [0])) > 0.9
    )
