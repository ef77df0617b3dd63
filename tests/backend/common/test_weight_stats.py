"""The per-weight statistics of a training step (`gradkit.backend.weight_stats`; the columns are those of
`backend/common/weight_stats.py`, which TensorFlow and JAX run and PyTorch's `torch/weight_stats.py`
mirrors): the zero and non-finite counts against numpy."""

import keras
import numpy as np
import pytest


@pytest.mark.parametrize("special", [None, np.inf, np.nan])
def test_the_zero_count_equals_numpy_with_signed_zeros_and_nonfinite_entries(special):
    from gradkit import backend

    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s).astype("float32") for s in [(40, 30), (30,), (7,)]]
    grads[0][rng.random((40, 30)) < 0.3] = 0.0
    grads[0][0, :5] = -0.0  # a zero all the same
    grads[2][:] = 0.0
    if special is not None:
        grads[1][4] = special  # the count then takes the path for non-finite gradients
    shapes = [g.shape for g in grads]
    table = backend.weight_stats([keras.ops.convert_to_tensor(g) for g in grads], None, None,
                                 ("sq", "nonfinite", "zeros"), shapes)  # fmt: skip
    table = keras.ops.convert_to_numpy(table)
    assert list(table[:, 2]) == [float(np.sum(g == 0)) for g in grads]
    assert list(table[:, 1]) == [float(np.sum(~np.isfinite(g))) for g in grads]
