"""File I/O for every layer: atomic writes, JSON, checksums.

Atomic writes go to a temporary file in the target's folder, flushed to disk, then `os.replace`d.

A reader never sees a half-written file, and a crash leaves at most a temporary file that the next
write ignores. Written files get the usual permissions, 0666 less the process umask (`mkstemp` makes
0600 files, which others sharing a run folder could not read).
"""

import contextlib
import hashlib
import json
import os
import tempfile

import numpy as np

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


def to_json(value, **kwargs):
    """JSON text of `value`: tuples as lists, numpy scalars and arrays as Python values, paths as
    strings, NaN and inf refused (ValueError); TypeError for anything else JSON cannot hold."""

    def default(v):
        if isinstance(v, (np.generic, np.ndarray)):
            return v.tolist()
        if isinstance(v, os.PathLike):
            return os.fspath(v)
        raise TypeError(f"{type(v).__name__} is not JSON serializable")

    return json.dumps(value, default=default, allow_nan=False, **kwargs)


def write_text(path, write):
    """Writes the text file `path` atomically; `write(f)` gets the open temporary file (UTF-8)."""

    def write_file(tmp):
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            write(f)

    write_atomic(path, write_file)


def write_json(obj, path, *, indent=2, sort_keys=False):
    """Writes `obj` as JSON to `path` atomically (see `to_json`)."""
    text = to_json(obj, indent=indent, sort_keys=sort_keys)
    write_text(path, lambda f: f.write(text))


def read_json(path):
    """The JSON value in `path`, or None when there is no such file; OSError/ValueError when unreadable."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sha256(filename):
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(filename, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path):
    """Flushes a directory's entries (after renames in it) to disk, where the OS allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - directories cannot be opened on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
