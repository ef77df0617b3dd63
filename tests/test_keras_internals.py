"""The Keras internals that loading a model for `gradkit evaluate` relies on (`gradkit._keras_internals`):
no random initial values drawn for what the file replaces (`random_initializers_skipped`) and no
TensorFlow import under Keras' `get_config` (`tensorflow_unasked`). Both must change no value: the loaded
weights equal the file's and Keras is itself again after the block, errors included."""

import random
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras.src.backend.common.variables import Variable as KerasVariable
from keras.src.initializers.random_initializers import Orthogonal, VarianceScaling

from gradkit import _keras_internals

# the command line's model loader: its failure inside the block is the error case the block must survive
from gradkit.cli import _inputs

from conftest import BACKEND, set_weights_from


@keras.saving.register_keras_serializable(package="gradkit_tests")
class HalfLoaded(keras.layers.Layer):
    """A layer whose own `load_own_variables` fills only its first variable from the file."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 2), initializer="glorot_uniform")
        self.extra = self.add_weight(shape=(2,), initializer="random_uniform")

    def call(self, x):
        return keras.ops.matmul(x, self.kernel) + self.extra

    def load_own_variables(self, store):
        self.kernel.assign(store["0"])


def _saved(tmp_path, model, name="m.keras"):
    path = str(tmp_path / name)
    model.save(path)
    return path


def test_a_variable_the_file_leaves_alone_gets_its_real_draw(tmp_path):
    model = keras.Sequential([keras.Input((3,)), HalfLoaded()])
    path = _saved(tmp_path, set_weights_from(model))
    random.seed(7)  # Keras draws the integer seed of `seed=None` initializers from Python's random
    plain = keras.saving.load_model(path)
    random.seed(7)
    with _keras_internals.random_initializers_skipped():
        skipped = keras.saving.load_model(path)
    extra = keras.ops.convert_to_numpy(skipped.layers[0].extra)
    assert np.any(extra != 0)
    np.testing.assert_array_equal(extra, keras.ops.convert_to_numpy(plain.layers[0].extra))
    np.testing.assert_array_equal(skipped.layers[0].kernel.numpy(), model.layers[0].kernel.numpy())


def test_only_variables_keras_initializers_fill_start_at_zeros():
    glorot = keras.initializers.GlorotUniform(seed=1)
    drawn = keras.ops.convert_to_numpy(glorot((4, 3)))
    with _keras_internals.random_initializers_skipped():
        outside = keras.ops.convert_to_numpy(glorot((4, 3)))  # no variable: a real draw
        filled = keras.Variable(initializer=glorot, shape=(4, 3))
        zeros = keras.ops.convert_to_numpy(filled)
        generator = keras.initializers.RandomNormal(seed=keras.random.SeedGenerator(1))
        generated = keras.Variable(initializer=generator, shape=(4, 3))
        assigned = keras.Variable(initializer=glorot, shape=(4, 3))
        assigned.assign(np.ones((4, 3)))
    np.testing.assert_array_equal(outside, drawn)
    np.testing.assert_array_equal(zeros, np.zeros((4, 3)))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(filled), drawn
    )  # unassigned: its draw, on leaving
    assert np.any(keras.ops.convert_to_numpy(generated) != 0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(assigned), np.ones((4, 3)))


def test_keras_is_itself_again_after_the_block_errors_included(tmp_path):
    before = (VarianceScaling.__call__, Orthogonal.__call__, KerasVariable.assign)
    with pytest.raises(RuntimeError, match="inside"):
        with _keras_internals.random_initializers_skipped():
            assert VarianceScaling.__call__ is not before[0]
            keras.Variable(initializer=keras.initializers.GlorotUniform(seed=1), shape=(2, 2))
            raise RuntimeError("inside")
    assert (VarianceScaling.__call__, Orthogonal.__call__, KerasVariable.assign) == before
    assert "_initialize_with_initializer" not in vars(keras.Variable)
    made = keras.Variable(initializer=keras.initializers.GlorotUniform(seed=1), shape=(2, 2))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(made),
        keras.ops.convert_to_numpy(keras.initializers.GlorotUniform(seed=1)((2, 2))),
    )
    with pytest.raises(_inputs.InputError, match="not a model Keras can load"):
        _inputs.load_model(str(tmp_path))  # an empty folder: the boosted-model load fails inside the block
    assert (VarianceScaling.__call__, Orthogonal.__call__, KerasVariable.assign) == before


def test_get_config_imports_no_tensorflow_and_says_the_same():
    if BACKEND == "tensorflow":
        pytest.skip("TensorFlow is the backend here")
    code = (
        "import sys, keras\n"
        "from gradkit import _keras_internals\n"
        "from keras.src.utils import module_utils\n"
        "layer = keras.layers.Dense(3, activation='softmax', dtype='float32')\n"
        "with _keras_internals.tensorflow_unasked():\n"
        "    config = layer.get_config()\n"
        "print('tensorflow' in sys.modules, vars(module_utils.tensorflow)['_available'])\n"
        "print(config == layer.get_config(), 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None", "True", "True"], out.stderr[-2000:]
