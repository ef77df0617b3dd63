"""Saving, loading, checkpoints and resume of boosted Keras networks (`gradkit.boosting._persistence`,
`_checkpoint`, `_load`)."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import gradkit
from gradkit.boosting import SAMME
from gradkit.boosting import _persistence as persistence

from conftest import blobs

FIT = {"epochs": 5, "batch_size": 16}


def data():
    return blobs()


def learner(*extra_layers):
    model = keras.Sequential(
        [
            keras.Input((2,)),
            *extra_layers,
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", run_eagerly=True
    )
    return model


def boosting(**kwargs):
    return SAMME(
        kwargs.pop("build_fn", learner),
        n_estimators=kwargs.pop("n_estimators", 3),
        fit_kwargs=FIT,
        random_state=7,
        verbose=0,
        **kwargs,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 3-round fit, checkpointed after every round into its directory."""
    path = str(tmp_path_factory.mktemp("reference"))
    return boosting(checkpoint_dir=path).fit(*data()), path


def assert_same_fit(a, b):
    x, _ = data()
    np.testing.assert_array_equal(a.estimator_weights_, b.estimator_weights_)
    np.testing.assert_array_equal(a.estimator_errors_, b.estimator_errors_)
    np.testing.assert_array_equal(a.classes_, b.classes_)
    np.testing.assert_array_equal(a.predict_proba(x), b.predict_proba(x))
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    for m, n in zip(a.estimators_, b.estimators_, strict=True):
        for u, v in zip(m.get_weights(), n.get_weights(), strict=True):
            np.testing.assert_array_equal(u, v)


def test_load_round_trip_is_bit_identical(reference, tmp_path):
    est, path = reference
    loaded = gradkit.load(path)
    assert type(loaded) is SAMME and loaded.build_fn is None and len(loaded.estimators_) == 3
    assert_same_fit(est, loaded)
    x, _ = data()
    np.testing.assert_array_equal(loaded.decision_function(x), est.decision_function(x))
    params = {k: v for k, v in est.get_params().items() if k != "build_fn"}
    assert {k: v for k, v in loaded.get_params().items() if k != "build_fn"} == params
    est.save(tmp_path / "copy")
    est.save(tmp_path / "copy")  # saving again into the same directory keeps one set of files
    names = sorted(os.listdir(tmp_path / "copy"))
    assert names[0] == "boost.json" and len(names) == 4 and all(n.startswith("member_") for n in names[1:])
    assert_same_fit(est, gradkit.load(tmp_path / "copy"))


def interrupted_in_round_3(path, fit_kwargs=FIT):
    """A checkpointed fit whose third learner fails to build: two rounds are in `path`."""
    calls = []

    def failing():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("interrupted in round 3")
        return learner()

    with pytest.raises(RuntimeError, match="round 3"):
        boosting(build_fn=failing, checkpoint_dir=path).set_params(fit_kwargs=fit_kwargs).fit(*data())


def test_resume_after_interruption_equals_uninterrupted_run(reference, tmp_path):
    path = str(tmp_path / "run")
    interrupted_in_round_3(path)
    with open(os.path.join(path, "boost.json")) as f:
        assert json.load(f)["n_rounds"] == 2  # every finished round was checkpointed
    resumed = boosting(checkpoint_dir=path).fit(*data(), resume=True)
    assert_same_fit(reference[0], resumed)
    with open(os.path.join(path, "boost.json")) as f:
        assert json.load(f)["n_rounds"] == 3


def test_resume_with_more_rounds_in_memory_equals_uninterrupted_run(reference):
    est = boosting(n_estimators=2).fit(*data())
    assert len(est.estimators_) == 2
    assert_same_fit(reference[0], est.set_params(n_estimators=3).fit(*data(), resume=True))
    with pytest.raises(ValueError, match="more than n_estimators"):
        est.set_params(n_estimators=2).fit(*data(), resume=True)


def test_resume_refuses_other_data_or_settings(reference):
    _, path = reference
    x, y = data()
    with pytest.raises(ValueError, match="differ"):
        boosting(checkpoint_dir=path).fit(x + 1, y, resume=True)
    with pytest.raises(ValueError, match="learning_rate"):
        boosting(checkpoint_dir=path, learning_rate=0.5).fit(x, y, resume=True)


class CountEpochs(keras.callbacks.Callback):
    """A callback that changes nothing (it only counts), so a fit with it equals one without."""

    epochs = 0

    def on_epoch_end(self, epoch, logs=None):
        CountEpochs.epochs += 1


def test_resume_with_callbacks_in_fit_kwargs_warns_and_equals_uninterrupted_run(reference, tmp_path):
    """Callbacks in `fit_kwargs` cannot be saved as JSON, so the checkpoint lists fit_kwargs as unsaved;
    a resume says it cannot compare them and goes on with the current ones (it used to fail with
    "not JSON serializable"). Saved settings that changed are still refused."""
    path = str(tmp_path / "run")
    with_callback = {**FIT, "callbacks": [CountEpochs()]}
    interrupted_in_round_3(path, with_callback)
    with open(os.path.join(path, "boost.json")) as f:
        assert json.load(f)["unsaved_params"] == ["fit_kwargs"]
    CountEpochs.epochs = 0
    with pytest.warns(UserWarning, match="could not save `fit_kwargs`"):
        resumed = boosting(checkpoint_dir=path).set_params(fit_kwargs=with_callback).fit(*data(), resume=True)
    assert CountEpochs.epochs == FIT["epochs"]  # the third round ran with the current callbacks
    assert_same_fit(reference[0], resumed)
    with pytest.raises(ValueError, match="learning_rate"):
        boosting(checkpoint_dir=path, learning_rate=0.5).set_params(fit_kwargs=with_callback).fit(
            *data(), resume=True
        )
    saved = str(tmp_path / "saved")
    shutil.copytree(reference[1], saved)  # fit_kwargs saved: callbacks added since are another setting
    with pytest.raises(ValueError, match="fit_kwargs"):
        boosting(checkpoint_dir=saved).set_params(fit_kwargs=with_callback).fit(*data(), resume=True)


def test_resume_of_a_finished_fit_trains_nothing():
    calls = []

    def stump():
        calls.append(1)
        return DecisionTreeClassifier(max_depth=1)

    x = np.arange(10.0)[:, None]
    y = (x[:, 0] > 4).astype(int)  # a stump is perfect: boosting ends after round 1
    est = SAMME(stump, n_estimators=3, verbose=0).fit(x, y)
    assert len(est.estimators_) == 1 and est.estimator_weights_[0] == 1.0
    est.set_params(n_estimators=5).fit(x, y, resume=True)
    assert len(calls) == 1 and len(est.estimators_) == 1
    fresh = SAMME(stump, n_estimators=2, verbose=0).fit(x, y, resume=True)  # nothing to resume: round 0
    assert len(fresh.estimators_) == 1 and len(calls) == 2


def test_safe_mode_refuses_lambda_layers(tmp_path):
    def with_lambda():
        return learner(keras.layers.Lambda(lambda t: t * 2.0))

    est = boosting(build_fn=with_lambda, n_estimators=1).fit(*data())
    est.save(tmp_path)
    with pytest.raises(ValueError, match="safe_mode"):
        gradkit.load(tmp_path)
    assert_same_fit(est, gradkit.load(tmp_path, safe_mode=False))


def corrupt(path, how):
    meta_path = os.path.join(path, "boost.json")
    with open(meta_path) as f:
        meta = json.load(f)
    member = os.path.join(path, meta["members"][1]["file"])
    if how == "no json":
        os.remove(meta_path)
    elif how == "truncated json":
        with open(meta_path, "r+") as f:
            f.truncate(40)
    elif how == "missing member":
        os.remove(member)
    elif how == "changed member":
        with open(member, "r+b") as f:
            f.seek(100)
            f.write(b"\x00\x01\x02")
    else:
        meta.update(how)
        with open(meta_path, "w") as f:
            json.dump(meta, f)


@pytest.mark.parametrize(
    "how,match",
    [
        ("no json", "no boost.json"),
        ("truncated json", "unreadable"),
        ("missing member", "missing"),
        ("changed member", "SHA-256"),
        ({"format_version": 99}, "format_version"),
        ({"format": "other"}, "not a gradkit.boosting"),
        ({"n_rounds": 2}, "inconsistent"),
        ({"members": [{"file": "../boost.json", "sha256": ""}] * 3}, "missing"),
        ({"estimator_weights": [1.0, -1.0, 1.0]}, "inconsistent"),
        ({"class": "os.system"}, "inconsistent"),
    ],
)
def test_corrupt_or_partial_directory_is_refused(reference, tmp_path, how, match):
    path = str(tmp_path / "broken")
    shutil.copytree(reference[1], path)
    corrupt(path, how)
    with pytest.raises(ValueError, match=match):
        gradkit.load(path)


def test_missing_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="directory"):
        gradkit.load(tmp_path / "nothing")


def test_failed_save_leaves_the_previous_save_intact(reference, tmp_path, monkeypatch):
    path = str(tmp_path / "saved")
    shutil.copytree(reference[1], path)
    other = gradkit.load(path)
    other.estimator_weights_ = np.array([1.0, 2.0, 3.0])
    other._checkpoint_files = None  # write every member again
    real_save, calls = keras.Model.save, []

    def crash_on_second(self, filepath, *args, **kwargs):
        calls.append(filepath)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_save(self, filepath, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "save", crash_on_second)
    with pytest.raises(OSError, match="disk full"):
        other.save(path)
    assert not [n for n in os.listdir(path) if n.startswith(".gradkit-tmp-")]
    assert_same_fit(reference[0], gradkit.load(path))
    monkeypatch.setattr(keras.Model, "save", real_save)
    other.save(path)
    np.testing.assert_array_equal(gradkit.load(path).estimator_weights_, [1.0, 2.0, 3.0])
    assert len(os.listdir(path)) == 4


def test_only_keras_learners_are_saved(tmp_path):
    x, y = data()
    est = SAMME(lambda: DecisionTreeClassifier(max_depth=1), n_estimators=2, verbose=0).fit(x, y)
    with pytest.raises(TypeError, match="Keras"):
        est.save(tmp_path)
    assert not persistence.exists(tmp_path)


def test_resume_refuses_a_build_fn_of_another_architecture(reference):
    """The resumed members and the new ones would be mixed in one vote: refused before any training."""
    _, path = reference
    wider = boosting(
        checkpoint_dir=path,
        n_estimators=4,
        build_fn=lambda: learner(keras.layers.Dense(8, activation="relu")),
    )
    with pytest.raises(ValueError, match="`build_fn` must build the architecture"):
        wider.fit(*data(), resume=True)
