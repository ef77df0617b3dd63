"""The groups of training diagnostics (`include=`): the log keys of each group (`GROUPS`) and the
per-weight statistics they are computed from (`_NEEDS`, among the `COLUMNS` of
`gradkit.backend.weight_stats`)."""

from gradkit import _checks

GROUPS = {
    "norm": ("grad_norm",),
    "clipped": ("grad_norm_clipped", "clip_fraction"),
    "params": ("param_norm",),
    "updates": ("update_norm", "update_ratio"),
    "health": ("grad_max", "grad_nonfinite", "grad_zero_fraction"),
    "noise_scale": ("noise_scale",),
}
# The order of the per-weight statistics (columns of `gradkit.backend.weight_stats`).
COLUMNS = (
    "sq",
    "clip_sq",
    "max",
    "nonfinite",
    "zeros",
    "param_sq",
    "update_sq",
    "full_sq",
    "half_sq",
    "other_sq",
)
_NEEDS = {
    "norm": {"sq"},
    "clipped": {"sq"},
    "params": {"param_sq"},
    "updates": {"update_sq", "param_sq"},
    # "sq": the count of non-finite entries runs only where the squared norm is not finite
    "health": {"sq", "max", "nonfinite", "zeros"},
    "noise_scale": {"full_sq", "half_sq", "other_sq"},
}


def check_include(include):
    """`include` as a tuple of group names in `GROUPS` order ("all": every group).

    Raises:
        TypeError: `include` is not a string or a list/tuple of strings.
        ValueError: an unknown group name, or an empty list.
    """
    expected = "a group name or a list of them among " + ", ".join(repr(g) for g in (*GROUPS, "all"))
    names = [include] if isinstance(include, str) else include
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        _checks.fail("include", expected, include, TypeError)
    if not names or any(n not in GROUPS and n != "all" for n in names):
        _checks.fail("include", expected, include)
    if "all" in names:
        return tuple(GROUPS)
    return tuple(group for group in GROUPS if group in names)


def check_every_n_steps(every_n_steps):
    """`every_n_steps` as an int >= 1."""
    return _checks.check_int(every_n_steps, "every_n_steps", minimum=1)


def keys(groups):
    """The log keys of `groups`, in group order."""
    return [key for group in groups for key in GROUPS[group]]


def log_names(groups, layer_names):
    """The log keys, key-major: `key`, then `key/<layer>` for each layer, for each key of `groups`."""
    return [name for key in keys(groups) for name in (key, *(f"{key}/{layer}" for layer in layer_names))]


def columns(groups, clipvalue):
    """The per-weight statistics `groups` need, in `COLUMNS` order (the clip of `clipvalue` needs the
    elementwise clipped squares and the max of each gradient)."""
    needed = set().union(*(_NEEDS[group] for group in groups))
    if "clipped" in groups and clipvalue:
        needed |= {"clip_sq", "max"}
    return tuple(column for column in COLUMNS if column in needed)


def needs_weights(groups):
    """Whether the weights before and after the step are read ("params", "updates")."""
    return "params" in groups or "updates" in groups


def needs_halves(groups):
    """Whether the gradient of the first half of the step's batch is taken ("noise_scale"): on JAX and
    PyTorch, where exact, from the step's own backward pass taken as its two halves'
    (`gradkit.backend.jax.noise_scale`, `torch.noise_scale`); elsewhere one more forward and backward
    pass over half the rows, on recorded steps only (`_noise_scale`)."""
    return "noise_scale" in groups


def noise_slots(names):
    """The indices in `names` (`log_names`) of the noise-scale keys, global then per layer."""
    return [i for i, name in enumerate(names) if name == "noise_scale" or name.startswith("noise_scale/")]
