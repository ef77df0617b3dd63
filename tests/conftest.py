"""Shared fixtures. The backend is chosen by KERAS_BACKEND before keras is imported (see Makefile).

On JAX, XLA's compilation takes most of the suite's time (about 70% of a quick study), and many tests
compile the same programs again (a study resumed on its own saved models, the same model in several
processes). JAX's persistent compilation cache is turned on for the tests, in a folder of the temporary
directory, unless `JAX_COMPILATION_CACHE_DIR` is set already; processes the tests start inherit it. A
cached program is the same executable, so no result changes.
"""

import os
import tempfile

os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"gradkit-tests-jax-{os.getuid()}")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers import models  # noqa: E402

BACKEND = keras.backend.backend()


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="module")
def digits_mlp():
    """A softmax MLP trained on digits, with 200 held-out rows: `(model, x, y)` (see helpers.models)."""
    return models.digits_mlp()


@pytest.fixture(scope="module")
def digits_cnn():
    """A logits CNN trained on digits, with 300 held-out images: `(model, x, y)` (see helpers.models)."""
    return models.digits_cnn()


def set_weights_from(model, seed=0, scale=0.5):
    """Deterministic weights from numpy, identical on every backend."""
    rng = np.random.RandomState(seed)
    model.set_weights([(rng.randn(*w.shape) * scale).astype(w.dtype) for w in model.get_weights()])
    return model


def central_difference(f, x, h=1e-3):
    """Central finite difference of the scalar function f at x (float64)."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (f(up) - f(down)) / (2 * h)
    return grad


def blobs():
    """Three overlapping 2-d blobs, 60 points: every round of the reference boosting fit has an error in
    (0.1, 0.4). Returns float32 `(60, 2)` and int labels `(60,)`."""
    rng = np.random.RandomState(0)
    y = np.arange(60) % 3
    centers = np.array([[0.0, 0.0], [2.5, 0.0], [0.0, 2.5]])
    return (centers[y] + rng.randn(60, 2) * 0.8).astype("float32"), y


def tsipras(n, seed, d=30, eta=0.5, p=0.95):
    """One robust feature (the label's sign, flipped with probability 1 - p) and d weak features shifted
    by +-eta: standard training leans on the weak ones, which an eps > eta attack flips (Tsipras et al.
    2019, "Robustness may be at odds with accuracy")."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = 2.0 * y - 1
    robust = s * np.where(rng.uniform(size=n) < p, 1.0, -1.0)
    weak = eta * s[:, None] + rng.standard_normal((n, d))
    return np.concatenate([robust[:, None], weak], axis=1).astype("float32"), y


def ball(adv, x, eps=0.1):
    """Hand-made or a peer's Linf examples with the rounding of `x + eps` undone, as gradkit undoes it
    on the examples it returns (`x + float32(0.1)` can lie 0.10000002 from `x`): the attacks agree to
    the bit after it."""
    from gradkit.attacks.geometry import inside

    return inside(np.asarray(adv, np.float32), x, eps, np.inf)


def import_adv_lib():
    """adv-lib 0.2.8's attacks (PyTorch backend only). adv-lib imports `visdom` (a plotting server) and
    `torchvision` (for LPIPS) at import time; neither is a test dependency (torchvision would replace the
    CPU build of torch), so empty stand-in modules are registered for them when they are absent. The
    attacks used in tests (apgd, fab, fmn, ddn) touch neither."""
    import sys
    import types

    for name in ("visdom", "torchvision", "torchvision.models"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    sys.modules["visdom"].__dict__.setdefault("Visdom", object)
    sys.modules["torchvision"].__dict__.setdefault("models", sys.modules["torchvision.models"])
    import adv_lib.attacks

    return adv_lib.attacks
