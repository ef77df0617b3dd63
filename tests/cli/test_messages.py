"""`gradkit.cli._messages`: the Python layer's messages, rewritten with the flags a user types."""

import pytest

from gradkit import _checks
from gradkit.cli import _messages


def _message(check, *args, **kwargs):
    with pytest.raises((ValueError, TypeError)) as err:
        check(*args, **kwargs)
    return str(err.value)


def _evaluate(message):
    return _messages.as_flags(message, _messages.EVALUATE, _messages.EVALUATE_ARGUMENTS)


def test_parameters_become_flags_in_the_name_and_in_what_was_received():
    text = _evaluate(_message(_checks.check_clip_values, (1.0, 0.0)))
    assert text == (
        "`--clip-values` must be None or a pair (min, max) of finite numbers with min <= max. "
        "Received: --clip-values=(1.0, 0.0)"
    )
    assert _evaluate(_message(_checks.check_seed, -1)) == (
        "`--seed` must be an integer >= 0 or None. Received: --seed=-1"
    )
    assert _evaluate("`state_path` must be a file path, not a folder. Received: state_path='runs'") == (
        "`--state` must be a file path, not a folder. Received: --state='runs'"
    )
    assert _evaluate("`attacks[2]` must be an attack name. Received: attacks[2]='cw'") == (
        "item 2 of `--attacks` must be an attack name. Received: item 2 of --attacks='cw'"
    )
    assert _evaluate("`x` must be inside clip_values=(0.0, 1.0).") == (
        "`x` of `DATA` must be inside --clip-values=(0.0, 1.0)."
    )


def test_names_inside_other_words_and_flags_are_left_alone():
    untouched = "`x_test` max=7, x.shape=(2, 3), --seed=1, `n_points_seen`, mysteps=2, `--batch-size`"
    assert _evaluate(untouched) == untouched
    assert _evaluate("`model` must be a classifier") == "`MODEL` must be a classifier"


def test_study_keys_become_its_flags():
    flags = _messages.study_flags(["n_estimators", "model", "out"])
    assert _messages.as_flags('`model="cnn"` needs images: use model="mlp". Received: out=\'r\'', flags) == (
        '`--model="cnn"` needs images: use --model="mlp". Received: --out=\'r\''
    )


def test_the_backend_is_read_from_the_environment_then_keras_json(tmp_path):
    assert _messages.configured_backend({"KERAS_BACKEND": "jax", "KERAS_HOME": str(tmp_path)}) == "jax"
    assert _messages.configured_backend({"KERAS_HOME": str(tmp_path)}) == "tensorflow"  # no keras.json
    (tmp_path / "keras.json").write_text('{"backend": "torch", "floatx": "float32"}')
    assert _messages.configured_backend({"KERAS_HOME": str(tmp_path)}) == "torch"


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_torchrun_needs_the_torch_backend(backend, tmp_path):
    torchrun = {"WORLD_SIZE": "2", "LOCAL_RANK": "0", "RANK": "0", "KERAS_HOME": str(tmp_path)}
    message = _messages.launcher_error({**torchrun, "KERAS_BACKEND": backend})
    assert "need the torch backend: run KERAS_BACKEND=torch torchrun" in message
    assert message.endswith(f"Received: KERAS_BACKEND={backend}")
    assert _messages.launcher_error({**torchrun, "KERAS_BACKEND": "torch"}) is None
    assert _messages.launcher_error({"KERAS_BACKEND": backend}) is None  # no launcher
