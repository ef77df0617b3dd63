"""JAX's fast paths: none. Its compiled steps are XLA programs that fuse the update's elementwise passes
and plan their buffers, so the attacks' `keras.ops` updates are the fast path here."""

linf_step = None
apgd_linf_step = None
linf_window = None
