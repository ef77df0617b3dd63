"""AutoAttack's versions, one declarative table (`TABLE`): which attacks each runs, in which order, with
which settings, per norm (what `set_version` of AutoAttack's `autoattack.py` sets); see `runs`.
"""

import dataclasses

import numpy as np

from gradkit import _checks

VERSIONS = ("standard", "plus", "rand", "malt", "custom")
EOT = "eot_iter"  # a setting whose value is `gradkit.evaluate`'s `eot_iter`
QUERY_SHARE = "query_share"  # a setting: the share of `gradkit.evaluate`'s `n_queries` an attack runs


@dataclasses.dataclass(frozen=True)
class Run:
    """One attack of a version: its registry name and its options of `gradkit.attacks.run_attack`
    (`settings`, sorted `(name, value)` pairs; the value `EOT` stands for `eot_iter`)."""

    attack: str
    settings: tuple = ()


def _run(attack, **settings):
    return Run(attack, tuple(sorted(settings.items())))


_STANDARD = (
    _run("apgd-ce", n_restarts=1),
    _run("apgd-t", n_restarts=1, n_target_classes=9),
    _run("fab-t", n_restarts=1, n_target_classes=9),
    _run("square"),
)
_STANDARD_L1 = (
    _run("apgd-ce", n_restarts=5, use_largereps=True),
    _run("apgd-t", n_restarts=1, n_target_classes=5, use_largereps=True),
    _run("fab-t", n_restarts=1, n_target_classes=9),
    _run("square"),
)
_PLUS = (
    _run("apgd-ce", n_restarts=5),
    _run("apgd-dlr", n_restarts=5),
    _run("fab", n_restarts=5),
    _run("square"),
    _run("apgd-t", n_restarts=1, n_target_classes=9),
    _run("fab-t", n_restarts=1, n_target_classes=9),
)
_RAND = (_run("apgd-ce", n_restarts=1, eot_iter=EOT), _run("apgd-dlr", n_restarts=1, eot_iter=EOT))
# MALT (Melamed et al. 2024): APGD-T towards the 9 targets of nearest linearized boundary (scored among
# the 100 most likely classes), 100 steps, 1 restart, as the authors' demo runs it; APGD-CE before it
# (AutoAttack's first attack) and Square after it with a fifth of the queries (1,000 at the default):
# the check against gradient masking, not a second search at AutoAttack's budget
_MALT = (
    _run("apgd-ce", n_restarts=1),
    _run("apgd-t", n_restarts=1, n_target_classes=9, target_selection="malt"),
    _run("square", query_share=0.2),
)
_MALT_L1 = (
    _run("apgd-ce", n_restarts=5, use_largereps=True),
    _run("apgd-t", n_restarts=1, n_target_classes=5, target_selection="malt", use_largereps=True),
    _run("square", query_share=0.2),
)

TABLE = {
    "standard": {"linf": _STANDARD, "l2": _STANDARD, "l1": _STANDARD_L1},
    "plus": {"linf": _PLUS, "l2": _PLUS, "l1": _PLUS},
    "rand": {"linf": _RAND, "l2": _RAND, "l1": _RAND},
    "malt": {"linf": _MALT, "l2": _MALT, "l1": _MALT_L1},
}


def norm_key(norm):
    """ "linf", "l2" or "l1" for a checked norm (np.inf, 2.0 or 1.0)."""
    return {np.inf: "linf", 2.0: "l2", 1.0: "l1"}[float(norm)]


def runs(version, norm, eot_iter):
    """The `Run`s of `version` ("standard", "plus", "rand" or "malt") for a checked `norm`, in cascade order,
    with `eot_iter` in place of `EOT`:

    | version  | norm     | attacks, in cascade order (settings)                                          |
    |----------|----------|-------------------------------------------------------------------------------|
    | standard | Linf, L2 | APGD-CE (1 restart), APGD-T (9 target classes, 1 restart), FAB-T (9 target    |
    |          |          | classes, 1 restart), Square (5000 queries)                                    |
    | standard | L1       | APGD-CE (5 restarts), APGD-T (5 target classes, 1 restart), both with eps     |
    |          |          | widened at the start (`use_largereps`, Croce & Hein 2021), FAB-T (9 target    |
    |          |          | classes, 1 restart), Square (5000 queries, its L1 version)                    |
    | plus     | any      | APGD-CE (5 restarts), APGD-DLR (5 restarts), FAB (untargeted, 5 restarts),    |
    |          |          | Square (5000 queries), APGD-T (9 target classes, 1 restart), FAB-T (9 target  |
    |          |          | classes, 1 restart); AutoAttack warns that "plus" is meant for Linf and L2    |
    | rand     | any      | APGD-CE and APGD-DLR, 1 restart each, the gradient averaged over `eot_iter` = |
    |          |          | 20 draws of the model's randomness per step (EOT)                             |
    | malt     | Linf, L2 | APGD-CE (1 restart), APGD-T towards MALT's 9 targets (the nearest linearized  |
    |          |          | boundaries among the 100 most likely classes, 1 restart), Square (a fifth of  |
    |          |          | `n_queries`, 1000: the check against gradient masking)                        |
    | malt     | L1       | as standard L1 (APGD-CE 5 restarts, APGD-T 5 targets, `use_largereps`) with   |
    |          |          | MALT's targets, then Square (a fifth of `n_queries`); no FAB-T                |
    | custom   | any      | the user's `attacks=` list, each attack with gradkit's defaults               |

    Every APGD and FAB runs `steps` = 100 iterations and Square `n_queries` = 5000 (`gradkit.evaluate`'s
    defaults, AutoAttack's values). An attack the model has too few classes for is skipped and named in
    the result's `skipped` with the reason (the DLR loss of APGD-DLR needs 3, targeted 4; FAB-T needs 3:
    a target other than the two top classes).

    References:
        Croce & Hein (2020), "Reliable evaluation of adversarial robustness with an ensemble of diverse
        parameter-free attacks", ICML, https://arxiv.org/abs/2003.01690 (sec. 5; AutoAttack's code,
        https://github.com/fra31/auto-attack, `AutoAttack.set_version`)
        Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
        ICML, https://arxiv.org/abs/2103.01208 (the L1 version)
        Athalye, Engstrom, Ilyas & Kwok (2018), "Synthesizing robust adversarial examples", ICML,
        https://arxiv.org/abs/1707.07397 (EOT, the "rand" version)
        Melamed, Yehudai & Shamir (2024), "MALT Powers Up Adversarial Attacks", NeurIPS,
        https://arxiv.org/abs/2407.02240 (the "malt" version: Algorithm 1; its settings, 9 targets
        among the top 100 classes, are the authors' demo's, odeliamel/MALT `demo.py`)
    """
    return tuple(
        Run(run.attack, tuple((k, eot_iter if v == EOT else v) for k, v in run.settings))
        for run in TABLE[version][norm_key(norm)]
    )


def check_version(version, attacks, eot_iter):
    """`(version, attacks)` resolved and checked before any work.

    `version` None means "custom" when `attacks` is given, else "standard"; `attacks` given as a version
    name ("standard") selects that version.

    Raises:
        ValueError: an unknown `version`; `attacks` together with a version other than "custom";
            "custom" without `attacks`; `eot_iter` < 1.
        TypeError: `version` not a str, `eot_iter` not an int.
    """
    _checks.check_int(eot_iter, "eot_iter", minimum=1)
    if version is not None and not isinstance(version, str):
        _checks.fail("version", "one of " + ", ".join(repr(v) for v in VERSIONS), version, TypeError)
    if version is not None:
        _checks.check_choice(version, "version", VERSIONS)
    if isinstance(attacks, str) and attacks in TABLE:  # attacks="standard": the version of that name
        if version not in (None, attacks):
            _checks.fail("attacks", f"None or a list of attacks with version={version!r}", attacks)
        return attacks, None
    if attacks is None:
        if version == "custom":
            _checks.fail("attacks", 'a list of attacks with version="custom"', attacks)
        return version or "standard", None
    if version not in (None, "custom"):
        _checks.fail(
            "attacks",
            f'None with version={version!r} (its attacks are fixed: pass version="custom" to '
            "run your own list)",
            attacks,
        )
    return "custom", attacks
