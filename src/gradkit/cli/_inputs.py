"""The model and the data of `gradkit evaluate`, from files or code; every failure is an `InputError`.

MODEL: a `.keras` file (`keras.saving.load_model`), a folder a boosting estimator saved (the study's
`adaboost_m1/`, `adv_boost/`; `gradkit.boosting.load`), or with `--model-fn module:function` a weights
file loaded into the model the function builds, or with `--torch-module module:function` a state_dict
`.pt`/`.pth` (or "-": the module's own weights) loaded into the `torch.nn.Module` the function builds,
wrapped by `gradkit.from_torch`. DATA: a `.npz` holding `x_test` and `y_test` (or `x`
and `y`), or one of the study's data set names (its test split, as `gradkit study` made it with seed 0);
for a model of several inputs a `.npz` of `y` (or `y_test`) and one array per input name.
`--clip-values` is lo,hi or per-feature bounds from files (`lo.npy,hi.npy`, or a `.npz` of `lo` and
`hi`); `--mask` a `.npy` (or for several inputs a `.npz` of one mask per input name).
"""

import importlib
import importlib.metadata
import inspect
import os
import sys

import numpy as np

from gradkit import __version__, _keras_internals, study
from gradkit.boosting import load as load_boosted

NPZ_PAIRS = (("x_test", "y_test"), ("x", "y"))
_BACKEND_DISTRIBUTIONS = {
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "jax": ("jax",),
    "torch": ("torch",),
}


class InputError(ValueError):
    """A model or data that cannot be used; the message says what to fix."""


def import_function(spec, option):
    """The callable named by "module:function" (the current folder is searched first)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise InputError(f"`{option}` must be module:function. Received: {option}={spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise InputError(f"`{option}` names nothing importable. Received: {option}={spec!r} ({err})") from err
    if not callable(fn):
        raise InputError(f"`{option}` must name a function. Received: {option}={spec!r}")
    return fn


def _call(fn, input_shape, n_classes):
    """`fn()` when it takes no argument, else `fn(input_shape, n_classes)`."""
    takes = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    return fn() if not takes else fn(tuple(input_shape), int(n_classes))


def build_from(fn, spec, input_shape, n_classes):
    """`fn()` when it takes no argument, else `fn(input_shape, n_classes)`; checked to be a Keras model."""
    import keras

    try:
        model = _call(fn, input_shape, n_classes)
    except NotImplementedError as err:  # Keras' own error: a TorchModuleWrapper without output_shape=
        if "TorchModuleWrapper" not in str(err):
            raise
        raise InputError(
            f"`--model-fn` {spec!r} wraps a torch module in TorchModuleWrapper without output_shape=: "
            f"return the torch.nn.Module itself and pass --torch-module {spec} instead (gradkit reads its "
            "output shape from one forward pass), or give TorchModuleWrapper(..., output_shape=...)"
        ) from err
    if not isinstance(model, keras.Model):
        raise InputError(f"{spec!r} must return a keras.Model. Received: {type(model).__name__}")
    return model


_TORCH_NAMES = {"state_dict": "MODEL", "input_shape": "DATA's input shape", "module": "--torch-module"}


def torch_model(path, spec, input_shape, n_classes):
    """The `torch.nn.Module` `spec` builds, its state_dict from `path` ("-": its own), as a Keras model;
    the helper's errors name the command's MODEL, DATA and --torch-module instead of its parameters."""
    from gradkit.gradients import from_torch

    if path != "-" and not os.path.isfile(path):
        raise InputError(
            f"`MODEL` must be a state_dict file (or - for the module's own weights). Received: {path!r}"
        )
    module = _call(import_function(spec, "--torch-module"), input_shape, n_classes)
    try:
        return from_torch(module, tuple(input_shape), state_dict=None if path == "-" else path)
    except (ValueError, TypeError) as err:
        message = str(err)
        for name, flag in _TORCH_NAMES.items():
            message = message.replace(f"`{name}`", f"`{flag}`").replace(
                f"Received: {name}=", f"Received: {flag}="
            )
        hint = " (DATA must be laid out as the module reads it)" if "`DATA's" in message else ""
        if message.startswith("`MODEL` must hold"):
            hint = (
                f" (the module was built for input shape {tuple(input_shape)} and {n_classes} classes: "
                "--n-classes sets the classes when DATA lacks the top class)"
            )
        raise InputError(f"{message}{hint} [--torch-module {spec}]") from err


def load_model(path, model_fn=None, *, input_shape=None, n_classes=None, torch_module=None):
    """The model at `path` (see the module docstring); InputError when it cannot be loaded."""
    import keras

    if torch_module:
        return torch_model(path, torch_module, input_shape, n_classes)
    if not os.path.exists(path):
        raise InputError(f"`MODEL` does not exist. Received: {path!r}")
    if model_fn:
        model = build_from(import_function(model_fn, "--model-fn"), model_fn, input_shape, n_classes)
        try:
            model.load_weights(path)
        except Exception as err:  # noqa: BLE001 - any loading failure is a bad MODEL for this model
            raise InputError(
                f"`MODEL` {path!r} does not hold the weights of the model {model_fn!r} built for input shape "
                f"{tuple(input_shape)} and {n_classes} classes (--n-classes sets the classes when DATA lacks "
                f"the top class): {type(err).__name__}: {err}"
            ) from err
        return model
    try:
        with _keras_internals.random_initializers_skipped():  # the file's values replace every draw
            if os.path.isdir(path):
                return load_boosted(path)
            model = keras.saving.load_model(path)
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - any loading failure is a bad MODEL
        raise InputError(
            f"`MODEL` {path!r} is not a model Keras can load (a .keras file or a saved boosted model "
            f"folder; weights need --model-fn): {type(err).__name__}: {err}"
        ) from err
    if not isinstance(model, keras.Model):
        raise InputError(
            f"`MODEL` must hold a Keras classifier. Received: {type(model).__name__} in {path!r}"
        )
    return model


def _from_npz(path):
    try:
        with np.load(path, allow_pickle=False) as data:
            for xk, yk in NPZ_PAIRS:
                if xk in data.files and yk in data.files:
                    return data[xk], data[yk]
            files = data.files
            labels = [k for k in ("y_test", "y") if k in files]
            if labels and len(files) > 2:  # several inputs: one array per input name
                return {k: data[k] for k in files if k not in labels}, data[labels[0]]
    except Exception as err:  # noqa: BLE001 - zip, pickle and format errors all mean "unreadable"
        raise InputError(f"`DATA` {path!r} is not a readable .npz of numeric arrays ({err})") from err
    raise InputError(f"`DATA` {path!r} must hold x_test and y_test (or x and y). Received: keys {files}")


def load_data(source):
    """`(x float32, y, name)` from a `.npz` or a study data set name."""
    if str(source).lower().endswith(".npz"):
        if not os.path.isfile(source):
            raise InputError(f"`DATA` file does not exist. Received: {source!r}")
        x, y = _from_npz(source)
    else:
        try:
            data = study.load_dataset(source)
        except study.DatasetError as err:
            raise InputError(f"`DATA`: {err}") from err
        x, y = data.x_test, data.y_test
    if isinstance(x, dict):
        if any(not np.issubdtype(a.dtype, np.number) or len(a) != len(y) for a in x.values()):
            raise InputError(
                "`DATA` must hold numeric inputs and y of one length. Received: "
                + ", ".join(f"{k} {a.dtype} {a.shape}" for k, a in x.items())
                + f", y {np.shape(y)}"
            )
        return {k: np.asarray(a, np.float32) for k, a in x.items()}, np.asarray(y), str(source)
    if not np.issubdtype(np.asarray(x).dtype, np.number) or len(x) != len(y):
        raise InputError(
            f"`DATA` must hold numeric x and y of one length. Received: x {np.asarray(x).dtype} "
            f"{np.shape(x)}, y {np.shape(y)}"
        )
    return np.asarray(x, np.float32), np.asarray(y), str(source)


def _array(path, flag):
    """The array of a .npy, or the arrays of a .npz by name; InputError naming `flag` otherwise."""
    if not os.path.isfile(path):
        raise InputError(f"`{flag}` file does not exist. Received: {path!r}")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - any format error means "unreadable"
        raise InputError(f"`{flag}` {path!r} is not a readable .npy or .npz ({err})") from err
    if isinstance(data, np.ndarray):
        return data
    with data:
        return {k: np.asarray(data[k]) for k in data.files}


def load_clip_values(spec):
    """`--clip-values` as `evaluate` takes it: `(lo, hi)` floats, or per-feature float32 arrays from
    "lo.npy,hi.npy" or an .npz holding `lo` and `hi`."""
    if not isinstance(spec, str):
        return tuple(spec)
    if spec.lower().endswith(".npz"):
        data = _array(spec, "--clip-values")
        if not isinstance(data, dict) or not {"lo", "hi"} <= set(data):
            raise InputError(f"`--clip-values` {spec!r} must hold arrays lo and hi. Received: {sorted(data)}")
        return np.asarray(data["lo"], np.float32), np.asarray(data["hi"], np.float32)
    names = spec.split(",")
    if len(names) != 2:
        raise InputError(f"`--clip-values` must be lo.npy,hi.npy or a .npz of lo and hi. Received: {spec!r}")
    return tuple(np.asarray(_array(name, "--clip-values"), np.float32) for name in names)


def load_mask(path):
    """`--mask`: a 0/1 array from a .npy, or from a .npz one per input name (several inputs)."""
    return None if path is None else _array(path, "--mask")


def classes_in(y):
    """The number of classes labels `y` imply: the largest class id + 1 (`(n,)` ids), or the columns of
    one-hot labels `(n, C)`; 2 for no labels."""
    y = np.asarray(y)
    if y.ndim == 2:
        return int(y.shape[-1])
    return int(y.max()) + 1 if y.ndim == 1 and len(y) and np.issubdtype(y.dtype, np.number) else 2


def versions():
    """{"gradkit", "keras", "backend", "backend_version"}: what ran an evaluation."""
    import keras

    backend, found = keras.backend.backend(), None
    for name in _BACKEND_DISTRIBUTIONS.get(backend, (backend,)):
        try:
            found = importlib.metadata.version(name)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"gradkit": __version__, "keras": keras.__version__, "backend": backend, "backend_version": found}
