"""Out-of-memory errors re-raised as one gradkit error that names `batch_size` (the argument that bounds
the rows of a compiled call); each backend tells its framework's error apart (`is_out_of_memory` in its
`core.py`)."""

import contextlib

from gradkit.errors import OutOfMemoryError


def out_of_memory_hint_for(is_out_of_memory):
    """The backend's `out_of_memory_hint`, built on its `is_out_of_memory(exc)`.

    Args:
        is_out_of_memory: whether an exception is the framework's out-of-memory error.

    Returns:
        `out_of_memory_hint(rows, what="an attack step")`: a context manager that re-raises the
        backend's out-of-memory error inside the block as `gradkit.OutOfMemoryError`, naming the
        `rows` of the failing call and `batch_size`; any other exception passes unchanged.
    """

    @contextlib.contextmanager
    def out_of_memory_hint(rows, what="an attack step"):
        """Re-raises the backend's out-of-memory error inside the block as `gradkit.OutOfMemoryError`."""
        try:
            yield
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise OutOfMemoryError(
                f"The device ran out of memory in {what} on a batch of {rows} rows ({type(exc).__name__}: "
                f"{first}). Pass a smaller `batch_size` (rows per compiled call), e.g. "
                f"batch_size={max(rows // 2, 1)}, or free the device's memory."
            ) from exc

    return out_of_memory_hint
