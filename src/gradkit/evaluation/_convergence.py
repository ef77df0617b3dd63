"""The convergence checks of `evaluate(..., check_convergence=True)`: the attacks run again with twice the
budget on the points still robust, and the trend of each ascent's best loss over its last steps.

- Rerun: after the cascade every registry attack of it runs once more on the points still robust, with
  twice the steps (Square: twice the queries) and twice the restarts where it has them, under the name
  `name + RERUN` ("apgd-ce (x2)"). A point it breaks counts as broken (the worst case per sample);
  the flag `not_converged` gives their count: the first run had not converged there.
- Trend: each ascent (APGD, PGD, BIM) records the best loss of the rows it has not fooled after every
  step (`gradkit.attacks.tracing_losses`), read once at its end. Over the rows no run of the attack
  fooled, the mean best loss rising by more than `RISE` (relative) over the last `TAIL` of the steps
  flags `still_improving`: more steps would have raised it further.

References:
    Carlini, Athalye, Papernot, Brendel, Rauber, Tsipras, Goodfellow, Madry & Kurakin (2019), "On
    evaluating adversarial robustness", sec. 4 ("verify iterative attacks converged"),
    https://arxiv.org/abs/1902.06705
"""

import contextlib
import inspect

import numpy as np

from gradkit.attacks import TABLE, tracing_losses
from gradkit.evaluation import _flags
from gradkit.evaluation._plan import Entry

RERUN = " (x2)"  # the suffix of an attack's rerun with twice the budget
RISE = 1e-3  # the relative rise of the mean best loss over the last TAIL of the steps that is flagged
TAIL = 0.1  # the share of the last steps the rise is measured over
TRACE = "loss_tail"  # the key of an attack's record holding `[start, end, count]` (`tracing`)


def _restarts(entry):
    """The restarts `entry` runs (its version's setting, the name's option, else the function's default),
    or None where the attack has none."""
    attack = TABLE[entry.attack]
    given = dict(attack.options) | dict(entry.settings)
    if "n_restarts" in given:
        return int(given["n_restarts"])
    parameter = inspect.signature(attack.function).parameters.get("n_restarts")
    return None if parameter is None else int(parameter.default)


def rerun(entry, config):
    """The `Entry` of `entry` with twice its steps (Square: queries) and restarts, or None (a callable,
    or FGSM: one step, no restart)."""
    if entry.fn is not None:
        return None
    budget, doubled = TABLE[entry.attack].budget_option, {}
    if budget == "steps":
        doubled["steps"] = 2 * dict(entry.settings).get("steps", config.steps)
    elif budget == "n_queries":
        doubled["n_queries"] = 2 * dict(entry.settings).get("n_queries", config.n_queries)
    restarts = _restarts(entry)
    if restarts is not None:
        doubled["n_restarts"] = 2 * restarts
    if not doubled:
        return None
    settings = tuple(sorted({**dict(entry.settings), **doubled}.items()))
    return Entry(entry.name + RERUN, entry.attack, entry.objective, settings=settings)


def entries(config):
    """The cascade's entries, then (`config.check_convergence`) their reruns with twice the budget."""
    if not config.check_convergence:
        return tuple(config.entries)
    reruns = (rerun(entry, config) for entry in config.entries)
    return (*config.entries, *(e for e in reruns if e is not None))


@contextlib.contextmanager
def tracing(entry, config, record):
    """Around one call of `entry`: with `config.check_convergence`, an ascent's loss trace is added to
    `record[TRACE]` (`[start, end, count]` summed over calls, `LossTrace.tails`); else nothing."""
    if not (config.check_convergence and entry.attack and TABLE[entry.attack].ascent):
        yield
        return
    with tracing_losses() as trace:
        yield
    tails = trace.tails(TAIL)
    record[TRACE] = [a + b for a, b in zip(record.get(TRACE, (0.0, 0.0, 0.0)), tails)]


def rise(tail):
    """The relative rise `(end - start) / |start|` of the mean best loss of `tail` = `[start, end,
    count]` (sums over `count` rows), or None without rows."""
    start, end, count = tail
    if not count:
        return None
    return (end - start) / max(abs(start), 1e-12)


def still_improving(per_attack):
    """The flag for ascents whose mean best loss over the points they left robust still rose by more
    than `RISE` (relative) over their last `TAIL` of steps, or None."""
    rising = {}
    for name, record in per_attack.items():
        r = rise(record[TRACE]) if TRACE in record else None
        if r is not None and r > RISE:
            rising[name] = r
    if not rising:
        return None
    said = ", ".join(f"{name} (+{100 * r:.2g}%)" for name, r in rising.items())
    message = (
        f"the mean best loss of the points these attacks left robust was still rising over their last "
        f"{100 * TAIL:.0f}% of steps (by more than {100 * RISE:g}%): {said}; more steps (steps=) would "
        "raise it further and may break more points."
    )
    return _flags.flag("still_improving", message, _flags.CARLINI)


def not_converged(config, per_attack, broken_by, start=0):
    """The flag for points the reruns with twice the budget broke (indices counted from `start`), or
    None; None as well without `config.check_convergence`."""
    if not config.check_convergence:
        return None
    fell = np.flatnonzero([bool(b) and b.endswith(RERUN) for b in broken_by])
    if not len(fell):
        return None
    names = [e.name for e in entries(config)[len(config.entries) :]]
    checked = per_attack.get(names[0], {}).get("n_points", 0) if names else 0
    shown = ", ".join(str(start + i) for i in fell[:10]) + (" ..." if len(fell) > 10 else "")
    message = (
        f"{len(fell)} of the {checked} points left robust fell when the attacks ran again with twice the "
        f"steps and restarts (indices {shown}): the attacks had not converged; these points count as "
        "broken, and the robust accuracy may still be an overestimate (raise steps= and n_restarts)."
    )
    return _flags.flag("not_converged", message, _flags.CARLINI)
