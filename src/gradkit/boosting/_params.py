"""Declarative checks of the boosting parameters, in the one message form of `gradkit._checks`.

Each constraint is `(parameter, rule, what is expected, exception type)`, checked in order by
`check_params` when `fit` starts (scikit-learn's convention: `__init__` only stores). A parameter the
estimator does not have (`learning_rate` of `AdaBoostM1`) is skipped. Numbers of the wrong kind
(`n_estimators=2.5`) raise ValueError; a `build_fn` or `fit_kwargs` of the wrong type raises TypeError.
"""

import math

import keras

from gradkit import _checks
from gradkit.boosting import _adversarial

ATTACKS = tuple(_adversarial.ATTACKS)
# fit arguments that boosting sets itself, or that would undo its sample weights: class_weight multiplies
# them (Keras refuses both together), validation_split never trains on the last rows
_RESERVED = {"x", "y", "sample_weight", "class_weight", "validation_split"}


def _finite(value):
    return _checks.is_real(value) and math.isfinite(value)


def _attack_ok(value):
    return value is None or (isinstance(value, dict) and value.get("attack") in ATTACKS)


CONSTRAINTS = (
    ("n_estimators", lambda v: _checks.is_int(v) and v >= 1, "an integer >= 1", ValueError),
    ("learning_rate", lambda v: _finite(v) and v > 0, "a finite number > 0", ValueError),
    (
        "build_fn",
        lambda v: callable(v) and not isinstance(v, keras.Model),
        "a function that returns a new learner each round (e.g. a compiled keras.Model), not a model",
        TypeError,
    ),
    ("fit_kwargs", lambda v: v is None or isinstance(v, dict), "a dict or None", TypeError),
    (
        "fit_kwargs",
        lambda v: not _RESERVED & set(v or {}),
        "free of x, y, sample_weight, class_weight and validation_split (boosting weighs every sample "
        "itself; pass validation_data instead)",
        ValueError,
    ),
    (
        "random_state",
        lambda v: v is None or (_checks.is_int(v) and v >= 0),
        "None or an integer >= 0",
        ValueError,
    ),
    ("verbose", lambda v: _checks.is_int(v) and v >= 0, "an integer >= 0", ValueError),
    ("adversarial", _attack_ok, f'None or a dict with "attack" in {ATTACKS} and "eps"', ValueError),
)


def check_params(estimator):
    """Raises the first violated constraint of `estimator`'s parameters, then checks `adversarial["eps"]`
    and `adversarial["mode"]`.

    Raises:
        ValueError: a parameter out of range, `fit_kwargs` holding x, y, sample_weight, class_weight or
            validation_split, an unknown
            attack, a missing or negative `adversarial["eps"]`, an `adversarial["mode"]` other than
            "augment" or "fit", or a key that the attack (in "fit" mode: nor
            `gradkit.adversarial_training`) does not take.
        TypeError: a `build_fn` that is not callable or is a model, a `fit_kwargs` that is not a dict.
    """
    params = estimator.get_params(deep=False)
    for name, rule, expected, error in CONSTRAINTS:
        if name in params and not rule(params[name]):
            _checks.fail(name, expected, params[name], error)
    if params["adversarial"] is not None:
        eps = params["adversarial"].get("eps")
        if not (_finite(eps) and eps >= 0):
            _checks.fail('adversarial["eps"]', "a finite number >= 0", eps)
        _adversarial.check(params["adversarial"])
