"""What `gradkit evaluate` says about its saved state: where it is kept (OUT/state or `--state`), what a
rerun reused, why a state cannot be resumed (in flags), and what Ctrl-C left."""

import os

# what a state file's fingerprint keys are on this command line
_CHANGED = {
    "model": "MODEL (its weights)",
    "x": "DATA (its inputs)",
    "y": "DATA (its labels)",
    "n_total": "--n-points",
    "epsilons": "--eps",
    "eps": "--eps",
    "norm": "--norm",
    "attacks": "--attacks or --version",
    "version": "--version",
    "eot_iter": "--eot-iter",
    "seed": "--seed",
    "steps": "--steps",
    "n_queries": "--n-queries",
    "clip_values": "--clip-values",
    "batch_size": "--batch-size",
    "backend": "KERAS_BACKEND",
    "rows": "--shard",
    "format": "the gradkit version that wrote it",
}


def state_path(args):
    """`--state`, else OUT/state/evaluation.json: where this run keeps its state."""
    return args.state or os.path.join(args.out, "state", "evaluation.json")


def where(args):
    """The state as the user names it: `--state FILE`, or the folder OUT/state."""
    return args.state or os.path.dirname(state_path(args))


def mismatch(error, args):
    """The message for a state this run cannot resume from, in flags, with how to start afresh."""
    if error.changed:
        follow = {"rows", "x", "y"} if "n_total" in error.changed else set()  # the first N points' digests
        changed = list(dict.fromkeys(_CHANGED.get(k, k) for k in error.changed if k not in follow))
        what = f"the state of another evaluation (changed: {', '.join(changed)})"
    else:
        what = error.why.replace("an unreadable file", "an unreadable state file")
    fresh = (
        "another --state, or delete it and its .npz files" if args.state else "another --out, or delete it"
    )
    return f"{where(args)} holds {what}. To start afresh, use {fresh}."


def resumed(shard, args):
    """One line naming what a rerun took from the saved state, or None."""
    if not shard.resumed:
        return None
    held = "; ".join(f"eps {eps:g}: {what}" for eps, what in shard.resumed)
    return f"gradkit evaluate: resumed from {where(args)}: {held}; nothing finished was redone."


def interrupted(args):
    """The Ctrl-C message: where the state is kept, or that no block had finished yet."""
    folder = os.path.dirname(os.path.abspath(state_path(args)))
    stem = os.path.splitext(os.path.basename(state_path(args)))[0]
    if os.path.isdir(folder) and any(name.startswith(stem) for name in os.listdir(folder)):
        return (
            f"gradkit evaluate: interrupted; state kept in {where(args)}: rerun the same command to resume."
        )
    return "gradkit evaluate: interrupted before any attack finished a block: nothing to resume."
