"""What several backends share: each backend folder imports from here what it does not do its own way.

- `core`: the plain `stateless_call`, a forward's `bind`, no retracing warnings, Keras' own seeding;
- `halves`: the first half of a step's batch and Keras' training loss on it (the noise scale);
- `memory`: `out_of_memory_hint`, built on a backend's `is_out_of_memory`;
- `no_distribution`: `batch_multiple` and `distribute_batch` where `keras.distribution` is unsupported;
- `norm_values`: the in-step norms as an opaque value (tensor or host floats);
- `processes`: what the process groups share (the CPU cores each process of a host keeps);
- `search`: the draw, proposal, forward pass and keep of a score-based attack's step;
- `summaries`: TensorBoard histograms through TensorFlow's summary writer;
- `train_steps`: the plain and quiet training steps, values before a step, the evaluation step;
- `weight_stats`: per-weight statistics of a step in `keras.ops` (TensorFlow, JAX).
"""
