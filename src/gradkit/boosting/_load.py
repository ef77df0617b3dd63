"""`load`: a saved or checkpointed boosting folder back as a fitted `AdaBoostM1` or `SAMME`."""

from gradkit.boosting import _checkpoint
from gradkit.boosting._adaboost import SAMME, AdaBoostM1

# The classes a folder may name in its `boost.json` ("class"); nothing else is ever constructed.
CLASSES = {cls.__name__: cls for cls in (AdaBoostM1, SAMME)}


def load(path, *, safe_mode=True):
    """Loads a boosting estimator written by `save()` / `fit(checkpoint_dir=...)`.

    Args:
        path: the saved directory (str or path-like).
        safe_mode: passed to `keras.saving.load_model`: True (default) refuses members that would run
            arbitrary Python code when loaded, such as `Lambda` layers holding a Python lambda. Pass
            False only for files you trust.

    Returns:
        A fitted `AdaBoostM1` or `SAMME` whose predictions equal the saved one's bit for bit. Its
        `build_fn` is None (set it with `set_params(build_fn=...)` to fit more rounds).

    Raises:
        ValueError: a `.keras`/`.h5` file (load it with `keras.saving.load_model`), a missing, partial or
            corrupt directory (no or unreadable `boost.json`, a wrong
            format version, missing members, a member whose SHA-256 does not match), or a member Keras
            refuses in safe mode. Nothing is returned half-loaded.
    """
    if str(path).lower().endswith((".keras", ".h5")):
        raise ValueError(
            f"`path` must be a directory written by a boosting estimator's save(); {str(path)!r} is a single "
            "Keras model file: load it with keras.saving.load_model(path)."
        )
    return _checkpoint.load(path, CLASSES, safe_mode=safe_mode)
