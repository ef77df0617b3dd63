"""What the command line says: every message names what its user can type.

The Python layer names its parameters (`clip_values`, `state_path`); `as_flags` rewrites such a message
with the command's flags (`--clip-values`, `--state`) and arguments (`MODEL`, `DATA`). `check_evaluate`
checks `gradkit evaluate`'s numbers itself, before any work, in the flags' own terms.
"""

import json
import math
import os
import re

from gradkit import _checks

# gradkit.evaluate's (and evaluate_shard's) parameters -> what `gradkit evaluate` takes instead
EVALUATE = {
    "epsilons": "--eps",
    "eps": "--eps",
    "norm": "--norm",
    "version": "--version",
    "eot_iter": "--eot-iter",
    "attacks": "--attacks",
    "state_path": "--state",
    "batch_size": "--batch-size",
    "seed": "--seed",
    "steps": "--steps",
    "n_queries": "--n-queries",
    "clip_values": "--clip-values",
    "preprocessing": "--preprocess",
    "rows": "--shard",
    "certify": "--certify",
    "mask": "--mask",
    "attack_inputs": "--attack-inputs",
}
EVALUATE_ARGUMENTS = {"model": "`MODEL`", "x": "`x` of `DATA`", "y": "`y` of `DATA` (the labels)"}
_INTEGERS = {  # dest -> (flag, minimum)
    "n_points": ("--n-points", 1),
    "batch_size": ("--batch-size", 1),
    "n_classes": ("--n-classes", 1),
    "seed": ("--seed", 0),
    "steps": ("--steps", 1),
    "n_queries": ("--n-queries", 1),
    "eot_iter": ("--eot-iter", 1),
}


def configured_backend(environ=None):
    """The Keras backend the next `import keras` will take, read without importing it: `KERAS_BACKEND`,
    else the "backend" of keras.json in Keras' folder (`KERAS_HOME`, else ~/.keras, /tmp/.keras when the
    home folder is read-only), else "tensorflow"."""
    environ = os.environ if environ is None else environ
    if "KERAS_BACKEND" in environ:
        return environ["KERAS_BACKEND"]
    home = os.path.expanduser("~")
    folder = environ.get("KERAS_HOME") or os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    try:
        with open(os.path.join(folder, "keras.json")) as f:
            return str(json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def launcher_error(environ=None):
    """The one-line reason `gradkit evaluate` cannot run under torchrun here, or None.

    torchrun sets `WORLD_SIZE` and `LOCAL_RANK` in every process; its processes join one torch.distributed
    group only on the torch backend (on another one each would evaluate every point alone, or fail deep in
    torchrun's ChildFailedError dump). Read before Keras is imported.
    """
    environ = os.environ if environ is None else environ
    if not {"WORLD_SIZE", "LOCAL_RANK"} & set(environ) or "JAX_NUM_PROCESSES" in environ:
        return None
    backend = configured_backend(environ)
    if backend == "torch":
        return None
    return (
        "torchrun's processes (WORLD_SIZE, LOCAL_RANK set) need the torch backend: run "
        f"KERAS_BACKEND=torch torchrun ... gradkit evaluate ... Received: KERAS_BACKEND={backend}"
    )


def study_flags(keys):
    """`gradkit study`'s flag of each option key of `gradkit.study.make_config` ("n_estimators" ->
    "--n-estimators")."""
    return {key: "--" + key.replace("_", "-") for key in keys}


def as_flags(message, flags, arguments=None):
    """`message` with each parameter name of `flags` written as its flag and each of `arguments` as the
    command line argument it comes from.

    "`clip_values` must be ... Received: clip_values=(1.0, 0.0)" becomes "`--clip-values` must be ...
    Received: --clip-values=(1.0, 0.0)"; "`attacks[0]`" becomes "item 0 of `--attacks`"; a name inside
    another word, after a dot or a dash (`x.shape`, `max=`, `--seed`) is left alone.
    """
    message = str(message)
    for name, flag in flags.items():
        message = re.sub(rf"`{name}\[(\d+)\]`", rf"item \1 of `{flag}`", message)
        message = re.sub(rf"(?<![\w.\-\[]){name}\[(\d+)\]=", rf"item \1 of {flag}=", message)
        message = re.sub(rf"`{name}(=[^`]*)?`", lambda m, f=flag: f"`{f}{m.group(1) or ''}`", message)
        message = re.sub(rf"(?<![\w.\-`\[]){name}=", f"{flag}=", message)
    for name, text in (arguments or {}).items():
        message = message.replace(f"`{name}`", text)
    return message


def check_evaluate(args):
    """Raises ValueError naming the flag when a number option of `gradkit evaluate` is out of range, or
    `--attacks` comes with a `--version` it would silently replace."""
    for dest, (flag, minimum) in _INTEGERS.items():
        if getattr(args, dest) is not None:  # None: the option was left out
            _checks.check_int(getattr(args, dest), flag, minimum=minimum)
    if args.attacks and args.suite != "standard":  # --attacks replaces the version's list: say so
        raise ValueError(
            "`--attacks` replaces the version's attacks: give --attacks or --version, not both. "
            f"Received: --version {args.suite} --attacks {','.join(args.attacks)}"
        )
    clip = args.clip_values
    if isinstance(clip, str):  # files of per-feature bounds: checked as they are read (cli._inputs)
        pass
    elif len(clip) != 2 or not all(math.isfinite(v) for v in clip) or not clip[0] < clip[1]:
        raise ValueError(
            f"`--clip-values` must be lo,hi: the input range, two finite numbers with lo < hi (e.g. 0,1 or "
            f"0,255). Received: --clip-values {','.join(f'{v:g}' for v in clip)}"
        )


def check_attacks(attacks, names):
    """Raises ValueError unless every item of `--attacks` is one of `names` (optionally "name/objective",
    the objective checked by `gradkit.evaluate`); "standard" is `--version standard`, not a list item."""
    if attacks is None:
        return
    if "standard" in attacks:
        raise ValueError(
            "`--attacks` must list attack names; AutoAttack's standard cascade is --version standard "
            f"(the default when --attacks is left out). Received: --attacks {','.join(attacks)}"
        )
    unknown = [a for a in attacks if a.partition("/")[0] not in names]
    if not attacks or unknown:
        raise ValueError(
            f"`--attacks` must be comma-separated names from {', '.join(names)} (each optionally "
            f"name/objective on an ensemble). Received: --attacks {','.join(attacks)} (unknown: "
            f"{', '.join(unknown) or 'none given'})"
        )


def check_data_range(x, clip_values):
    """Raises ValueError when DATA's x leaves `--clip-values` (the attacks keep every input inside it)."""
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    if x.size and (lo < clip_values[0] or hi > clip_values[1]):
        raise ValueError(
            f"`--clip-values` must hold the values of `DATA`'s x, which span [{lo:g}, {hi:g}]: pass the "
            f"range your model takes (e.g. --clip-values 0,255 for 8-bit images, or scale x to [0, 1]). "
            f"Received: --clip-values {clip_values[0]:g},{clip_values[1]:g}"
        )
