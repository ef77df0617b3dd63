"""Units and scale of an evaluation: the input range, eps in input units and as a share of the range, and
the flags for a scale that looks wrong.

The range is `clip_values`, or the data's own [min, max] when there is none. In Linf, eps is compared
with the range's width `hi - lo`; in L2 and L1 with the box's diameter in that norm,
`(hi - lo) * d ** (1 / p)` over the `d` input features (the largest L_p distance between two inputs), so
the share means the same in every norm: 100% reaches every point of the box.

- `eps_large`: eps over a quarter of that diameter (the eps-ball reaches far into other classes), or
  robust accuracy equal to clean accuracy at an eps below half a level of 8-bit data (1/510 of the
  diameter: eps in the wrong units, such as 8/255 on data in [0, 255]).
- `data_out_of_range_for_model`: the model's first layers (`keras.layers.Rescaling`,
  `keras.layers.Normalization`) expect inputs of another width than `clip_values` or than the data's
  own [min, max], or the data fill less than a tenth of `clip_values`.

References:
    Carlini et al. (2019), "On evaluating adversarial robustness", sec. 2-3 (state the threat model and
    its units), https://arxiv.org/abs/1902.06705
"""

import dataclasses

import keras
import numpy as np

from gradkit import _checks
from gradkit.evaluation._flags import CARLINI, flag

EPS_LARGE = 0.25  # eps over this share of the box's diameter is flagged
EPS_SMALL = 0.5 / 255  # robust == clean at eps under this share (half an 8-bit level) is flagged
WIDTH_FACTOR = 8.0  # two ranges whose widths differ by more than this factor do not match
DATA_SHARE = 0.1  # data spanning less than this share of clip_values are flagged
KERAS = (
    "Keras preprocessing layers: Rescaling, https://keras.io/api/layers/preprocessing_layers/"
    "image_preprocessing/rescaling/ and Normalization, https://keras.io/api/layers/preprocessing_layers/"
    "numerical/normalization/"
)
_PREPROCESSING = (keras.layers.Rescaling, keras.layers.Normalization)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What the scale checks know of the model and all of the data: the classes, the input features, the
    data's `(min, max)`, and the input range the model's first layers imply (`(lo, hi)`, or None) with
    those layers described (`layers`)."""

    classes: int
    features: int
    data_range: tuple
    model_range: tuple | None = None
    layers: str | None = None

    def to_dict(self):
        return {
            "classes": self.classes,
            "features": self.features,
            "data_range": list(self.data_range),
            "model_range": None if self.model_range is None else list(self.model_range),
            "layers": self.layers,
        }

    @classmethod
    def from_dict(cls, record):
        """The `Inputs` of `to_dict`'s dict; None for None (a shard saved before they were kept)."""
        if record is None:
            return None
        model = record["model_range"]
        return cls(
            int(record["classes"]),
            int(record["features"]),
            tuple(record["data_range"]),
            None if model is None else tuple(model),
            record["layers"],
        )


def _leading(model):
    """The Rescaling and Normalization layers the model starts with (in nested models too), in order."""
    found = []
    for layer in getattr(model, "layers", ()):
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, _PREPROCESSING):
            found.append(layer)
            continue
        if isinstance(layer, keras.Model):
            inner = _leading(layer)
            found += inner
            if inner and len(inner) == sum(not isinstance(w, keras.layers.InputLayer) for w in layer.layers):
                continue
        break
    return found


def _affine(layer, shape):
    """`(a, b)` float64 arrays of `shape`: the layer as the map `a * x + b`, probed at 0 and 1."""
    zero, one = (keras.ops.convert_to_numpy(layer(np.full((1, *shape), v, "float32"))) for v in (0, 1))
    if zero.shape != (1, *shape):
        raise ValueError(f"{layer.name} changes the shape")
    return (one - zero)[0].astype(np.float64), zero[0].astype(np.float64)


def _describe(layer, a, b):
    a, b = a[a != 0], b[a != 0]
    if isinstance(layer, keras.layers.Rescaling):
        return f"Rescaling(scale={np.median(a):.4g}, offset={np.median(b):.4g})"
    return f"Normalization(mean {np.median(-b / a):.4g}, std {np.median(1 / a):.4g})"


def model_range(model, shape):
    """`((lo, hi), layers)`: the input range the model's first Rescaling/Normalization layers imply, or
    `(None, None)`. The layers are read as one affine map `a * x + b` per feature; the range is the
    preimage of [0, 1] (of [-1, 1] when they shift 0 below -0.5; of [-2, 2], two standard deviations,
    after a Normalization), the median over the features.

    Raises:
        ValueError, TypeError, RuntimeError: a layer that cannot run on the probes.
    """
    a, b, described = np.ones(shape), np.zeros(shape), []
    layers = _leading(model)
    for layer in layers:
        a_l, b_l = _affine(layer, shape)
        a, b = a_l * a, a_l * b + b_l
        described.append(_describe(layer, a_l, b_l))
    if not layers or not np.any(a):
        return None, None
    y = (-2.0, 2.0) if any(isinstance(layer, keras.layers.Normalization) for layer in layers) else (0.0, 1.0)
    if y == (0.0, 1.0) and np.median(b) < -0.5:
        y = (-1.0, 1.0)
    a, b = a[a != 0], b[a != 0]
    ends = np.sort(np.stack([(y[0] - b) / a, (y[1] - b) / a]), axis=0)
    return (float(np.median(ends[0])), float(np.median(ends[1]))), " -> ".join(described)


def inputs(model, x, classes):
    """The `Inputs` of a checked model (its first member for an ensemble) and all of the data `x`."""
    from gradkit.gradients import as_ensemble

    first = as_ensemble(model).models[0]
    try:
        implied, layers = model_range(first, x.shape[1:])
    except (ValueError, TypeError, RuntimeError):  # no check rather than no evaluation
        implied, layers = None, None
    data = (float(np.min(x)), float(np.max(x)))
    return Inputs(int(classes), int(np.prod(x.shape[1:])), data, implied, layers)


def scale(config):
    """The eps and range of an evaluation (`Evaluation.scale`): "range" `[lo, hi]` ("range_of":
    "clip_values" or "data"), "eps", "eps_of_range" (eps / (hi - lo)), "diameter" (the box's diameter
    in the norm) and "eps_of_diameter", and the data's and the model's ranges; None without `inputs`."""
    found = config.inputs
    if found is None:
        return None
    lo, hi = config.clip_values or found.data_range
    width, p = hi - lo, float(config.norm)
    diameter = width * found.features ** (1 / p) if p != np.inf else width
    return {
        "range": [lo, hi],
        "range_of": "data" if config.clip_values is None else "clip_values",
        "eps": config.eps,
        "eps_of_range": config.eps / width if width > 0 else None,
        "diameter": diameter,
        "eps_of_diameter": config.eps / diameter if diameter > 0 else None,
        "data_range": list(found.data_range),
        "model_range": None if found.model_range is None else list(found.model_range),
        "model_layers": found.layers,
        "n_classes": found.classes,
        "n_features": found.features,
    }


def share(value):
    """A share as a percentage with 3 significant digits: 0.0314 -> "3.14%"."""
    return f"{100 * value:.3g}%"


def _range(values):
    return f"[{values[0]:.4g}, {values[1]:.4g}]"


def text(scale, eps, norm):
    """The header's eps: "eps=0.0314 (Linf; 3.14% of the range [0, 1])"; in L2 and L1 its share of the
    box's diameter ("eps=0.5 (L2; 0.902% of the box's L2 diameter 55.43: range [0, 1], 3072 features)");
    "eps=0.0314 (Linf)" when the range is unknown or empty."""
    name = _checks.norm_name(norm).capitalize()
    if scale is None or scale["eps_of_range"] is None:
        return f"eps={eps:g} ({name})"
    whose = "the range" if scale["range_of"] == "clip_values" else "the data's range (no clip_values)"
    if float(norm) == np.inf:
        return f"eps={eps:g} ({name}; {share(scale['eps_of_range'])} of {whose} {_range(scale['range'])})"
    diameter = f"{share(scale['eps_of_diameter'])} of the box's {name} diameter {scale['diameter']:.4g}"
    return (
        f"eps={eps:g} ({name}; {diameter}: {whose} {_range(scale['range'])}, {scale['n_features']} features)"
    )


def eps_flag(scale, norm, clean_accuracy, robust_accuracy):
    """`eps_large` for an eps over `EPS_LARGE` of the box's diameter, or robust accuracy equal to the clean
    one at an eps under `EPS_SMALL` of it (eps > 0); else None."""
    if scale is None or not scale["eps_of_diameter"]:
        return None
    eps, share_d, (lo, hi) = scale["eps"], scale["eps_of_diameter"], scale["range"]
    where = f"eps {eps:g} is {share(scale['eps_of_range'])} of the range {_range((lo, hi))}"
    if float(norm) != np.inf:
        where += (
            f" ({share(share_d)} of the box's {_checks.norm_name(norm)} diameter {scale['diameter']:.4g})"
        )
    if share_d > EPS_LARGE:
        guess = f" (eps={eps / 255:.4g}, CLI: --eps {eps:g}/255, if it counted levels of 255)"
        whole = "the range" if float(norm) == np.inf else "that diameter"
        message = (
            f"{where}: over a quarter of {whole}, where the eps-ball may hold points of other classes "
            "(0.3 on MNIST in [0, 1] is the largest budget in common use), so robust accuracy may not "
            "measure robustness. eps is in the data's units: pass the share of the range you mean times "
            f"its width{guess if eps > 1 >= hi - lo else ''}, or check clip_values (CLI: --clip-values)."
        )
        return flag("eps_large", message, CARLINI)
    if eps > 0 and share_d < EPS_SMALL and clean_accuracy > 0 and robust_accuracy >= clean_accuracy:
        meant = eps * (hi - lo)
        guess = f"for {share(eps)} of the range pass eps={meant:.4g} (CLI: --eps {meant:g}), or "
        guess = guess if eps <= 1 else ""
        message = (
            f"robust accuracy equals clean accuracy ({clean_accuracy:.4f}) and {where}, less than half a "
            "level of 8-bit data: the attacks could move no point, as when eps is in other units than "
            f"the data (8/255 on data in [0, 255]). eps is in the data's units: {guess}rescale the "
            "data."
        )
        return flag("eps_large", message, CARLINI)
    return None


def _mismatch(a, b):
    """True when the widths of the ranges `a` and `b` differ by more than `WIDTH_FACTOR`."""
    wa, wb = a[1] - a[0], b[1] - b[0]
    return wa > 0 and wb > 0 and max(wa / wb, wb / wa) > WIDTH_FACTOR


def _clip_option(lo, hi):
    return f"clip_values=({lo:.4g}, {hi:.4g}) (CLI: --clip-values={lo:.4g},{hi:.4g})"


def _fix(data, model, clip):
    """The fix `range_flag` names: rescale the data (by 255 between 8-bit and [0, 1] units), or pass
    other clip_values."""
    if model is not None and _mismatch(data, model):
        if data[0] >= 0 and data[1] <= 1 and model[1] - model[0] > 50:
            how, target = "multiply the data by 255", (0, 255)
        elif data[0] >= 0 and 1 < data[1] <= 255 and model[1] - model[0] < 5:
            how, target = "divide the data by 255", (0, 1)
        else:
            how, target = f"rescale the data to about {_range(model)}", model
        keep = clip is not None and not _mismatch(clip, target)
        rest = "" if keep else f", pass {_clip_option(*target)}"
        return f"{how} (the units the model was trained in){rest}, and give eps in those units"
    if model is not None and clip is not None and _mismatch(clip, model):
        return f"pass {_clip_option(*model)}, about the range the model expects"
    return (
        f"pass the data's range, {_clip_option(*data)}, or rescale the data to fill {_range(clip)} if "
        "the model was trained on that range"
    )


def range_flag(found, clip_values):
    """`data_out_of_range_for_model` for `Inputs` `found` and `clip_values` (or None); else None."""
    if found is None:
        return None
    data, model, clip = found.data_range, found.model_range, clip_values
    said, differ = [], []
    if model is not None and clip is not None and _mismatch(clip, model):
        differ.append(f"clip_values are {_range(clip)}")
    if model is not None and _mismatch(data, model):
        differ.append(f"the data span {_range(data)}")
    if differ:
        expect = f"the model's first layers ({found.layers}) expect inputs in about {_range(model)}"
        said.append(f"{expect}, but {' and '.join(differ)}")
    width = None if clip is None else clip[1] - clip[0]
    if width and data[1] - data[0] < DATA_SHARE * width:
        part = share((data[1] - data[0]) / width)
        said.append(f"the data {_range(data)} fill {part} of clip_values {_range(clip)}")
    if not said:
        return None
    fix = _fix(data, model, clip)
    message = (
        "; ".join(said) + ": the model sees its inputs in other units than the evaluation assumes, so "
        f"the accuracies and eps are not what they seem. {fix[0].upper()}{fix[1:]}."
    )
    return flag("data_out_of_range_for_model", message, KERAS if model is not None else CARLINI)
