"""Atomic file writes: a temporary file in the target's folder, flushed to disk, then `os.replace`d.

A reader never sees a half-written file, and a crash leaves at most a temporary file that the next
write ignores. Written files get the usual permissions, 0666 less the process umask (`mkstemp` makes
0600 files, which others sharing a run folder could not read).
"""

import contextlib
import os
import tempfile

_UMASK = os.umask(0o022)  # os.umask can only be read by setting it; set it straight back
os.umask(_UMASK)


def _fsync(filename):
    with open(filename, "rb") as f:
        os.fsync(f.fileno())


def write_temporary(folder, write, *, prefix=".tmp-", suffix=""):
    """Calls `write(tmp)` on a new file in `folder`, flushes it to disk and gives it the usual
    permissions; returns its path for the caller to `os.replace`. Removes it if anything fails."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        _fsync(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return tmp


def write_atomic(path, write):
    """Writes the file `path` atomically: `write(tmp)` writes a temporary file that replaces `path`."""
    tmp = write_temporary(os.path.dirname(os.path.abspath(path)), write, suffix=os.path.splitext(path)[1])
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
