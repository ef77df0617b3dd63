"""The study's model zoo (`build_model`) and how each trained model is saved in the output folder.

single.keras, adv_single.keras  the single networks (`keras.saving.load_model`); adv_single's file holds
                                no trace of adversarial training (`gradkit.adversarial_training` is
                                undone before saving; a saved model never carries it)
adaboost_m1/, adv_boost/        the boosted ensembles (`gradkit.boosting.load`)
"""

import importlib
import os
import sys
import warnings

import keras

from gradkit._io import write_atomic
from gradkit.boosting import load

_FILES = {
    "single": "single.keras",
    "adv_single": "adv_single.keras",
    "adaboost_m1": "adaboost_m1",
    "adv_boost": "adv_boost",
}


def build_model(kind, input_shape, n_classes, *, learning_rate=3e-3):
    """A compiled classifier for the study: "cnn", "mlp" or your own ("module:function"), over `n_classes`.

    "cnn": Conv2D(16, 3) - MaxPool(2) - Conv2D(32, 3) - MaxPool(2) - Flatten - Dense(n_classes) (the
    pools only while the image is at least 4 pixels high). "mlp": Flatten - Dense(64) -
    Dense(n_classes). ReLU activations, Adam(`learning_rate`), sparse categorical cross-entropy.
    "module:function": `function(input_shape, n_classes)` from `module` (the current folder searched
    first), which must return a compiled `keras.Model` (`learning_rate` is not passed).

    Args:
        kind: "cnn" (needs images `(h, w, c)`), "mlp" or "module:function".
        input_shape: shape of one sample, e.g. `(8, 8, 1)`.
        n_classes: number of classes K >= 2.
        learning_rate: Adam's learning rate. Defaults to 3e-3.

    Returns:
        A compiled `keras.Sequential` mapping `(batch, *input_shape)` float32 inputs to `(batch, K)`
        probabilities, with the "accuracy" metric.

    Raises:
        ValueError: "cnn" on flat `(d,)` inputs; a function that cannot be imported, or that returns
            something other than a compiled `keras.Model`.
    """
    if ":" in kind:
        return model_from_function(kind, input_shape, n_classes)
    layers = keras.layers
    stack = [keras.Input(tuple(input_shape))]
    if kind == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f'`kind="cnn"` needs images (h, w, c). Received: input_shape={input_shape}')
        height = input_shape[0]
        for filters in (16, 32):  # the datasets' images are (h, w, c) whatever the global layout
            stack.append(
                layers.Conv2D(filters, 3, padding="same", activation="relu", data_format="channels_last")
            )
            if height >= 4:
                stack.append(layers.MaxPooling2D(2, data_format="channels_last"))
                height //= 2
        stack.append(layers.Flatten())
    else:
        stack += [layers.Flatten(), layers.Dense(64, activation="relu")]
    stack.append(layers.Dense(n_classes, activation="softmax"))
    model = keras.Sequential(stack)
    model.compile(
        keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    return model


def model_from_function(spec, input_shape, n_classes):
    """The compiled Keras model `function(input_shape, n_classes)` returns, for `spec` "module:function".

    Raises:
        ValueError: `spec` names nothing importable, or the function returns no compiled `keras.Model`.
    """
    module, _, name = spec.partition(":")
    if os.getcwd() not in sys.path:  # `gradkit` as a console script does not search the current folder
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"`model` must name an importable function. Received: model={spec!r} ({err})"
        ) from err
    model = fn(tuple(input_shape), int(n_classes))
    if not isinstance(model, keras.Model) or getattr(model, "optimizer", None) is None:
        raise ValueError(
            f"`model` {spec!r} must return a compiled keras.Model (call model.compile first). "
            f"Received: {type(model).__name__}"
        )
    return model


def model_path(out, name):
    """Where the model `name` (one of `MODELS`) lives in the folder `out`."""
    return os.path.join(out, _FILES[name])


def save_model(model, path):
    """`single.keras` atomically; ensembles through their `save()` (atomic per file)."""
    if isinstance(model, keras.Model):
        write_atomic(path, model.save)
    else:
        model.save(path)


def load_model(name, path):
    """The saved model, or None (with a warning) when it is missing or cannot be loaded."""
    try:
        return keras.saving.load_model(path) if path.endswith(".keras") else load(path)
    except Exception as err:  # noqa: BLE001 - any failure means "train it again"
        warnings.warn(
            f"Could not load the finished model {name!r} from {path!r} ({err}); training it again.",
            stacklevel=2,
        )
        return None
