"""Importing Keras without the C++ start-up lines TensorFlow writes to stderr.

`import tensorflow` (which `import keras` does on the TensorFlow backend) prints absl and oneDNN lines
straight to file descriptor 2, before Python's logging exists, and `TF_CPP_MIN_LOG_LEVEL` does not stop
them all; more come with the first operation. The command line imports Keras through `import_keras()`,
which captures descriptor 2 during the import and a first operation, drops those known lines and writes
anything else back, so real errors still show.
"""

import contextlib
import importlib
import os
import re
import sys
import tempfile

NOISE = re.compile(
    r"(All log messages before absl::InitializeLog|oneDNN custom operations are on|"
    r"This TensorFlow binary is optimized to use|rebuild TensorFlow with the appropriate compiler flags|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|computation placer already registered|"
    r"TF-TRT Warning|cuda_(dnn|fft|blas)\.cc|external/local_xla)"
)


@contextlib.contextmanager
def _captured_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield sink
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            lines = text.splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if line.strip() and not NOISE.search(line)))


def import_keras():
    """`import keras` (and its backend) with TensorFlow's start-up noise dropped; returns the module."""
    if "keras" in sys.modules:
        return sys.modules["keras"]
    with _captured_stderr():
        keras = importlib.import_module("keras")
        keras.ops.convert_to_numpy(keras.ops.add(1.0, 1.0))  # the device start-up lines come with the 1st op
    return keras
