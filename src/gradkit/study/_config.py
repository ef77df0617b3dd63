"""The study's configuration (`StudyConfig`, `make_config`): the single source of its defaults, validated
on construction, with no Keras import (the command line builds its `--help` from it). Every failure is a
`ConfigError` (a ValueError; also a TypeError for a value of the wrong type), in `gradkit._checks`' form.
"""

import dataclasses
import math
import os

from gradkit import _checks
from gradkit.study import _norms
from gradkit.study._datasets import check_name

MODELS = ("single", "adv_single", "adaboost_m1", "adv_boost")
ATTACKS = ("fgsm", "pgd", "apgd-ce", "apgd-t", "square", "standard", "fmn", "fab", "ddn")
ADV_ATTACKS = ("pgd", "fgsm")
ADV_MODES = ("augment", "fit")  # the "mode" of adv_boost's `adversarial` (see gradkit.AdaBoostM1)
NETWORKS = ("cnn", "mlp")
CERTIFY = ("ibp", "crown-ibp", "crown")  # gradkit.certificates.METHODS (read here without importing Keras)
CERTIFY_NORMS = ("linf", "l2")  # the balls bound propagation bounds
# options written to config.json and results.json only when set: a study without them writes the very
# files it wrote before they existed
STORED_WHEN_SET = ("certify",)
QUICK = {
    "epsilons": list(_norms.QUICK_EPSILONS["linf"]),
    "n_estimators": 2,
    "epochs": 3,
    "apgd_steps": 5,
    "square_queries": 100,
}
QUICK_SUBSET = (2000, 1000)  # at most this many train / test samples with quick=True
_MINIMUM = {
    "n_estimators": 1,
    "epochs": 1,
    "seed": 0,
    "batch_size": 1,
    "pgd_steps": 1,
    "apgd_steps": 1,
    "square_queries": 1,
    "adv_steps": 1,
}


class ConfigError(ValueError):
    """A study option or output directory that cannot be used; the message says what to change."""


class _ConfigTypeError(ConfigError, TypeError):
    """A study option of the wrong type: a `ConfigError` that is also a `TypeError`."""


def _network(model):
    """`model` if it is one of `NETWORKS` or "module:function" (dotted names); ValueError otherwise."""
    module, colon, name = model.partition(":") if isinstance(model, str) else ("", "", "")
    dotted = all(part.isidentifier() for part in module.split("."))
    if model in NETWORKS or (colon and dotted and name.isidentifier()):
        return model
    return _checks.fail("model", '"cnn", "mlp" or "module:function" (your own network)', model)


def _checked(check, *args, **kwargs):
    """`check(*args, **kwargs)` with its TypeError / ValueError turned into a `ConfigError`."""
    try:
        return check(*args, **kwargs)
    except TypeError as err:
        raise _ConfigTypeError(str(err)) from None
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _fail(name, expected, value, *, wrong_type=False):
    """Raises the house message as a `ConfigError` (also a TypeError when `wrong_type`)."""
    _checked(_checks.fail, name, expected, value, TypeError if wrong_type else ValueError)


def _path(value, name):
    if not isinstance(value, (str, os.PathLike)):
        _fail(name, "a non-empty path or name", value, wrong_type=True)
    if not os.fspath(value):
        _fail(name, "a non-empty path or name", value)
    return os.fspath(value)


def _listed(values):
    """`values` as a list, or None for a str, bytes or non-iterable (a single value is not a list)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        return None
    return list(values)


def _nonnegative(values, name):
    """Sorted unique floats, each finite and >= 0, from a non-empty sequence."""
    listed = _listed(values)
    if not listed:
        _fail(name, "a non-empty list of numbers >= 0", values, wrong_type=listed is None)
    if not all(_checks.is_real(v) and math.isfinite(v) and v >= 0 for v in listed):
        raise ConfigError(f"`{name}` must hold finite numbers >= 0. Received: {name}={listed!r}")
    return tuple(sorted({float(v) for v in listed}))


def _certify(method, norm):
    """`method`: None or one of `CERTIFY`, at a norm bound propagation takes."""
    if method is None:
        return None
    method = _checks.check_choice(method, "certify", CERTIFY)
    if norm not in CERTIFY_NORMS:
        raise ValueError(
            f"`certify` bounds Linf and L2 balls only: use --norm linf or l2 with it. Received: "
            f"certify={method!r} with norm={norm!r}"
        )
    return method


def _attacks(attacks):
    """The attack names in first-seen order, duplicates dropped."""
    listed = _listed(attacks)
    if not listed or any(a not in ATTACKS for a in listed):
        names = ", ".join(f'"{a}"' for a in ATTACKS)
        raise ConfigError(f"`attacks` must be a non-empty list of {names}. Received: attacks={attacks!r}")
    return tuple(dict.fromkeys(listed))


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """A validated study configuration; the field defaults are the study's defaults.

    Attributes:
        out: output directory (str). Defaults to "runs/study".
        dataset: "digits", "mnist", "fashion_mnist", "cifar10" or a path ending in ".npz" (see
            `load_dataset`). Defaults to "digits".
        model: the network of every model: "cnn", "mlp", or "module:function" naming a function
            `fn(input_shape, n_classes)` that returns a compiled Keras classifier (see `build_model`).
            Defaults to "cnn".
        norm: the threat model of every attack, "linf", "l2" or "l1" (also "inf", "2", "1"; see
            `gradkit.study._norms`). Defaults to "linf".
        epsilons: tuple of finite floats >= 0, budgets in `norm`, in input units (inputs lie in
            [0, 1]), sorted and deduplicated. Defaults to None: the norm's list, Linf (0, 0.02, 0.05,
            0.1, 0.2, 0.3), L2 (0, 0.1, 0.25, 0.5, 1, 2), L1 (0, 0.5, 1, 2, 4, 10) (sized for
            8x8 digits and ending at MNIST's literature radius; `_norms` gives the sources).
        attacks: non-empty tuple from `ATTACKS`, duplicates dropped: "fgsm", "pgd" (`pgd_steps`),
            "apgd-ce", "apgd-t" (`apgd_steps`), "square" (`square_queries`) and "standard"
            (`gradkit.evaluate`: APGD-CE, APGD-T, FAB-T, Square; on boosted models each gradient attack
            with the objectives "loss_sum" and "vote_margin"), "fmn" and "fab" (`gradkit.min_norm` with
            FMN or FAB in `norm`, `apgd_steps` steps: one run per model gives every eps and each point's
            minimal norm), "ddn" (`gradkit.min_norm` with DDN; L2 only).
            Defaults to ("fgsm", "pgd", "standard").
        n_estimators: boosting rounds, int >= 1. Defaults to 5.
        epochs: epochs per member, int >= 1 (`single` trains `epochs * n_estimators`). Defaults to 4.
        seed: int >= 0: the digits split, the initial weights, PGD's random start. Defaults to 0.
        batch_size: training batch size, int >= 1. Defaults to 32.
        pgd_steps: PGD steps, int >= 1; `eps_step = 2.5 * eps / pgd_steps`. Defaults to 10.
        apgd_steps: APGD iterations (per target class for APGD-T), int >= 1. Defaults to 10.
        square_queries: Square's query budget, int >= 1. Defaults to 200.
        adv_attack: the attack of adversarial training (`adv_single`) and of adversarial boosting's
            rounds (`adv_boost`), "pgd" or "fgsm" (fast FGSM with a random start inside `fit`).
            Defaults to "pgd".
        adv_eps: its eps, a finite float >= 0, in `norm` (Linf under "l1": gradkit's adversarial
            training takes Linf and L2; see `_norms`). Defaults to None: Linf 0.1, L2 0.5, L1 0.1 (Linf).
        adv_steps: its steps ("pgd"; eps_step = 2.5 * adv_eps / adv_steps), int >= 1. Defaults to 5.
        adv_mode: how `adv_boost` trains its rounds: "augment" (examples made between rounds against
            the ensemble so far, training on clean + adversarial copies) or "fit" (each member
            trained with `gradkit.adversarial_training`). Defaults to "augment".
        certify: None, "ibp", "crown-ibp" or "crown": also certify every model at every eps by bound
            propagation (`gradkit.evaluation.certified_points`; a boosted model's weighted vote from its
            members' certificates), giving a "certified" row per model (a lower bound on robust
            accuracy beside the worst case, its upper bound) and the check that no attack broke a
            certified point. Linf and L2 only. Defaults to None (no certificates; the study's files are
            those of a study before the option existed).
        quick: whether `QUICK` and `QUICK_SUBSET` apply (see `from_options`). Defaults to False.
        deterministic: turn on the backend's deterministic ops before anything runs (TensorFlow's op
            determinism, `torch.use_deterministic_algorithms`; JAX on CPU is deterministic already, on a
            GPU it warns unless `XLA_FLAGS=--xla_gpu_deterministic_ops=true`). Defaults to False.

    Raises:
        ConfigError: a value outside the ranges above (also a TypeError for a wrong type).
        DatasetError: a `dataset` that is not a known name nor a ".npz" path.
    """

    out: str = "runs/study"
    dataset: str = "digits"
    model: str = "cnn"
    norm: str = "linf"
    epsilons: tuple | None = None  # None: the norm's `_norms.DEFAULT_EPSILONS`
    attacks: tuple = ("fgsm", "pgd", "standard")
    n_estimators: int = 5
    epochs: int = 4
    seed: int = 0
    batch_size: int = 32
    pgd_steps: int = 10
    apgd_steps: int = 10
    square_queries: int = 200
    adv_attack: str = "pgd"
    adv_eps: float | None = None  # None: the norm's `_norms.DEFAULT_ADV_EPS`
    adv_steps: int = 5
    adv_mode: str = "augment"
    certify: str | None = None
    quick: bool = False
    deterministic: bool = False

    def __post_init__(self):
        norm = _checked(_norms.check_norm, self.norm)
        epsilons = _norms.DEFAULT_EPSILONS[norm] if self.epsilons is None else self.epsilons
        adv_eps = _norms.DEFAULT_ADV_EPS[norm] if self.adv_eps is None else self.adv_eps
        canonical = {
            "out": _path(self.out, "out"),
            "dataset": check_name(_path(self.dataset, "dataset")),
            "model": _checked(_network, self.model),
            "norm": norm,
            "epsilons": _nonnegative(epsilons, "epsilons"),
            "attacks": _attacks(self.attacks),
            **{
                key: _checked(_checks.check_int, getattr(self, key), key, minimum=low)
                for key, low in _MINIMUM.items()
            },
            "adv_attack": _checked(_checks.check_choice, self.adv_attack, "adv_attack", ADV_ATTACKS),
            "adv_eps": _checked(_checks.check_eps, adv_eps, "adv_eps"),
            "adv_mode": _checked(_checks.check_choice, self.adv_mode, "adv_mode", ADV_MODES),
            "certify": _checked(_certify, self.certify, norm),
            "quick": _checked(_checks.check_flag, self.quick, "quick"),
            "deterministic": _checked(_checks.check_flag, self.deterministic, "deterministic"),
        }
        _checked(_norms.check_attacks, canonical["attacks"], norm)
        for key, value in canonical.items():
            object.__setattr__(self, key, value)

    @classmethod
    def from_options(cls, **options):
        """The defaults, then `QUICK` if `quick` (its epsilons those of the norm), then `options` (None
        means "the default").

        Raises:
            ConfigError: an unknown option, or a value `StudyConfig` refuses.
        """
        unknown = sorted(set(options) - set(DEFAULTS))
        if unknown:
            raise ConfigError(f"Unknown study options {unknown}. Known: {sorted(DEFAULTS)}")
        quick = _checked(_checks.check_flag, options.get("quick") or False, "quick")
        given = {key: value for key, value in options.items() if value is not None}
        norm = _checked(_norms.check_norm, given.get("norm", "linf"))
        fast = {**QUICK, "epsilons": list(_norms.QUICK_EPSILONS[norm])} if quick else {}
        return cls(**{**fast, **given, "quick": quick})

    def to_dict(self, *, out=True):
        """The configuration as a JSON-ready dict in field order (tuples as lists); with `out=False` what
        config.json and results.json store: no `out`, and the options of `STORED_WHEN_SET` only when set."""
        items = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if not out:
            items.pop("out")
            items = {k: v for k, v in items.items() if k not in STORED_WHEN_SET or v is not None}
        return {key: list(value) if isinstance(value, tuple) else value for key, value in items.items()}


DEFAULTS = StudyConfig().to_dict()  # at the default norm, Linf (epsilons and adv_eps depend on the norm)


def make_config(**options):
    """The full, validated study configuration as a dict: `DEFAULTS`, then `QUICK` if `quick`, then `options`.

    Args:
        **options: any of `DEFAULTS`' keys (see `StudyConfig`); None means "the default". `quick`:
            bool (2 members of 3 epochs, epsilons Linf 0, 0.1, 0.3 (L2 0, 0.5, 1; L1 0, 1, 2), 5 APGD
            steps, 100 Square queries, at most 2,000/1,000 train/test samples; explicit options still
            win).

    Returns:
        dict with every key of `DEFAULTS`, in that order; `epsilons` and `attacks` as lists.

    Raises:
        ConfigError: an unknown key or a value outside its range (also a TypeError for a wrong type).
        DatasetError: a `dataset` that is not a known name nor a ".npz" path.

    Example:
        >>> make_config(quick=True, epochs=1)["epsilons"]
        [0.0, 0.1, 0.3]
    """
    return StudyConfig.from_options(**options).to_dict()
