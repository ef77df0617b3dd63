"""`gradkit evaluate --torch-module module:function`: the checks that come before any import of Keras.

A `torch.nn.Module` runs on Keras' PyTorch backend only, and TensorFlow and PyTorch loaded into one
process can crash it (a segfault, no message). So before Keras (or the user's module, which imports
torch) is imported, `problem(args)` reads the backend Keras will choose, as Keras does (`KERAS_BACKEND`,
else the "backend" of `$KERAS_HOME/keras.json` or `~/.keras/keras.json`, else "tensorflow"), and says in
one line what to type instead; a state_dict file given without `--torch-module` is refused here too.
"""

import json
import os
import sys

STATE_DICT_SUFFIXES = (".pt", ".pth")


def keras_backend():
    """The name of the backend `import keras` picks (or picked), read without importing Keras."""
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return str(json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def problem(args):
    """The message of what is wrong with `--torch-module`, MODEL and the backend, or None."""
    state_dict = str(args.model).lower().endswith(STATE_DICT_SUFFIXES)
    if args.torch_module is None:
        if state_dict:
            return (
                f"`MODEL` {args.model!r} is a PyTorch state_dict: pass --torch-module module:function "
                "(the function that builds its torch.nn.Module) and run with KERAS_BACKEND=torch"
            )
        return None
    if args.model_fn:
        return (
            "`--torch-module` and `--model-fn` exclude each other: pass the one that builds MODEL's network"
        )
    backend = keras_backend()
    if backend != "torch":
        return (
            "`--torch-module` needs the PyTorch backend: rerun with KERAS_BACKEND=torch. "
            f"Received: KERAS_BACKEND={backend}"
        )
    return None
