"""Fixtures of the monitor's tests."""

import keras
import pytest

# PyTorch's CPU sums the in-step norms on the host ("host"); on an accelerator it keeps them in tensors
# ("tensor"), a path the tests run on CPU by switching `_HOST_ON_CPU` off. TF and JAX compile them.
NORM_PATHS = ["host", "tensor"] if keras.backend.backend() == "torch" else ["compiled"]


@pytest.fixture(params=NORM_PATHS)
def norm_path(request, monkeypatch):
    """Each way the in-step norms are summed on this backend (PyTorch's host and tensor paths)."""
    if request.param == "tensor":
        # the backend's private switch: the one seam that runs the accelerator's tensor path on a CPU
        from gradkit.backend.torch import norms as torch_norms

        monkeypatch.setattr(torch_norms, "_HOST_ON_CPU", False)
    return request.param
