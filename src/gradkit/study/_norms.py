"""The study's threat models: `--norm linf|l2|l1`, each norm's default eps lists and adversarial-training
radius (for inputs in [0, 1]), and the norm the adversarial models train at. Keras-free (the command
line's `--help` reads it).

References:
    Tramer & Boneh (2019), "Adversarial training and robustness for multiple perturbations", NeurIPS,
    https://arxiv.org/abs/1904.13000 (MNIST: Linf 0.3, L1 10, L2 2).
    Maini, Wong & Kolter (2020), "Adversarial robustness against the union of multiple perturbation
    models", ICML, https://arxiv.org/abs/1909.04068 (MNIST: Linf 0.3, L2 2, L1 10; CIFAR-10: L2 0.5,
    L1 12).
    Croce & Hein (2021), "Mind the box: l1-APGD for sparse adversarial attacks on image classifiers",
    ICML, https://arxiv.org/abs/2103.01208 (L1 12 on CIFAR-10; PGD's weakness at L1).
    Croce et al. (2021), "RobustBench: a standardized adversarial robustness benchmark", NeurIPS
    Datasets and Benchmarks, https://arxiv.org/abs/2010.09670 (CIFAR-10: Linf 8/255, L2 0.5).
"""

import math

NORMS = ("linf", "l2", "l1")
LABELS = {"linf": "Linf", "l2": "L2", "l1": "L1"}
VALUES = {"linf": math.inf, "l2": 2.0, "l1": 1.0}  # what gradkit's attacks take as `norm`
_SPELLINGS = {"inf": "linf", "2": "l2", "1": "l1"}
# The literature's radii for 28x28 MNIST (d = 784) are Linf 0.3, L2 2 and L1 10 (Tramer & Boneh 2019;
# Maini, Wong & Kolter 2020), for 32x32x3 CIFAR-10 (d = 3072) Linf 8/255, L2 0.5 (AutoAttack,
# RobustBench) and L1 12 (Croce & Hein 2021). A perturbation of the same size per coordinate has an L2
# norm growing as sqrt(d) and an L1 norm growing as d, so on the study's default data, scikit-learn's
# 8x8 digits (d = 64), MNIST's radii correspond to L2 2 * sqrt(64 / 784) = 0.57 and L1 10 * 64 / 784 =
# 0.82. The L2 and L1 lists bracket these digits-sized radii and the study's CNN's median minimal
# perturbations on digits (benchmarks/README.md; the Linf list and adv_eps 0.1 sit the same way around
# its Linf median), and they end at MNIST's literature value, as the Linf list ends at MNIST's 0.3: one
# default serves digits and MNIST. For CIFAR-10 pass `--epsilons` (e.g. L2 0,0.25,0.5,1; L1 0,6,12).
DEFAULT_EPSILONS = {
    "linf": (0.0, 0.02, 0.05, 0.1, 0.2, 0.3),
    "l2": (0.0, 0.1, 0.25, 0.5, 1.0, 2.0),
    "l1": (0.0, 0.5, 1.0, 2.0, 4.0, 10.0),
}
QUICK_EPSILONS = {"linf": (0.0, 0.1, 0.3), "l2": (0.0, 0.5, 1.0), "l1": (0.0, 1.0, 2.0)}
DEFAULT_ADV_EPS = {"linf": 0.1, "l2": 0.5, "l1": 0.1}
ADV_NORMS = {"linf": "linf", "l2": "l2", "l1": "linf"}  # the norm adversarial training runs at
MIN_NORM_ATTACKS = {"fmn": NORMS, "fab": NORMS, "ddn": ("l2",)}  # the norms each minimum-norm attack takes


def check_norm(norm):
    """`norm` as "linf", "l2" or "l1" (also "inf", "2", "1", any case; `math.inf`, 2 and 1).

    Raises:
        ValueError: any other value, naming `norm`.
    """
    key = _SPELLINGS.get(norm.lower(), norm.lower()) if isinstance(norm, str) else None
    if not isinstance(norm, (str, bool)) and norm in (math.inf, 2, 1):
        key = {math.inf: "linf", 2: "l2", 1: "l1"}[norm]
    if key not in NORMS:
        raise ValueError(f'`norm` must be "linf", "l2" or "l1". Received: norm={norm!r}')
    return key


def check_attacks(attacks, norm):
    """Raises ValueError when `attacks` holds a minimum-norm attack that does not take `norm` (DDN: L2)."""
    for attack in attacks:
        if norm not in MIN_NORM_ATTACKS.get(attack, NORMS):
            raise ValueError(
                f'`attacks` holds "{attack}", an L2 attack (Rony et al. 2019), and the study runs at norm '
                f'"{norm}": use "fmn" or "fab" there, or --norm l2. Received: attacks={",".join(attacks)}'
            )


def adv_norm_note(norm):
    """The header's line on the adversarial-training norm when it differs from the attacks' norm, else "".

    Adversarial training (`adv_single`, `adv_boost`) trains at the study's norm for Linf and L2.
    gradkit's adversarial training takes Linf and L2 only: its inner attack is PGD, whose L1 step (the
    gradient over its L1 norm, a dense step) is a weak L1 attack (Croce & Hein 2021 replace it by
    l1-APGD's sparse step within the box), and a model trained against a weak attack promises a
    robustness it does not have. So under `--norm l1` the adversarial models train at Linf (`adv_eps`
    in Linf units, `ADV_NORMS`) and are attacked at L1; the table's header and results.json
    ("adv_norm": "linf") say so.
    """
    if ADV_NORMS[norm] == norm:
        return ""
    return (
        f"adversarial training at {LABELS[ADV_NORMS[norm]]}, adv_eps in {LABELS[ADV_NORMS[norm]]} units: "
        f"gradkit's adversarial training takes Linf and L2 (PGD's {LABELS[norm]} step is a weak attack to "
        f"train against; Croce & Hein 2021); the attacks are {LABELS[norm]}"
    )
