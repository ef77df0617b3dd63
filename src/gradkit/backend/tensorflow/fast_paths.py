"""TensorFlow's fast paths: none. Its compiled steps fuse or plan their buffers (XLA, the graph's
allocator), so the attacks' `keras.ops` updates are the fast path here."""

linf_step = None
apgd_linf_step = None
linf_window = None
