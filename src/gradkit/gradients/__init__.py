"""The gradient engine: loss gradients w.r.t. inputs and weights, compiled once, for models and ensembles.

Public: `InputGradient`, `input_gradient`, `WeightGradient`, `weight_gradients`, `WeightedEnsemble`,
`from_torch` (a `torch.nn.Module` as a Keras model).
The other names serve the layers above (attacks, monitor, boosting, study): labels, losses, batching and
model-input checks, each defined in one private module of this package.
"""

from gradkit.gradients._attack_gradient import AttackGradient
from gradkit.gradients._member_norms import member_gradient_norms
from gradkit.gradients._batches import predict_batched
from gradkit.gradients._cache import cached
from gradkit.gradients._decision import check_classifier
from gradkit.gradients._decision import classes_from_outputs
from gradkit.gradients._decision import compiled_spec
from gradkit.gradients._decision import member_forward
from gradkit.gradients._decision import outputs_are_logits
from gradkit.gradients._decision import predict_classes
from gradkit.gradients._ensemble import WeightedEnsemble
from gradkit.gradients._ensemble import as_ensemble
from gradkit.gradients._ensemble import weighted_vote
from gradkit.gradients._input_gradient import InputGradient
from gradkit.gradients._input_gradient import input_gradient
from gradkit.gradients._labels import check_labels
from gradkit.gradients._labels import check_sample_weight
from gradkit.gradients._labels import labels_for_loss
from gradkit.gradients._logits import logits_model
from gradkit.gradients._losses import LossSpec
from gradkit.gradients._losses import check_attack_loss
from gradkit.gradients._losses import resolve_loss
from gradkit.gradients._model_io import check_model
from gradkit.gradients._model_io import check_x
from gradkit.gradients._model_io import input_names
from gradkit.gradients._outputs import n_outputs
from gradkit.gradients._preprocessing import affine_of
from gradkit.gradients._preprocessing import check_preprocessing
from gradkit.gradients._preprocessing import preprocessed
from gradkit.gradients._preprocessing import row_shape
from gradkit.gradients._surrogate import check_surrogate
from gradkit.gradients._outputs import output_index
from gradkit.gradients._outputs import output_shape
from gradkit.gradients._outputs import select_output
from gradkit.gradients._model_io import training_kwargs
from gradkit.gradients._torch_module import from_torch
from gradkit.gradients._weight_gradient import WeightGradient
from gradkit.gradients._weight_gradient import weight_gradients

__all__ = [
    "AttackGradient",
    "InputGradient",
    "LossSpec",
    "WeightGradient",
    "WeightedEnsemble",
    "affine_of",
    "as_ensemble",
    "cached",
    "check_attack_loss",
    "check_classifier",
    "check_labels",
    "check_sample_weight",
    "check_surrogate",
    "check_model",
    "check_preprocessing",
    "classes_from_outputs",
    "compiled_spec",
    "from_torch",
    "check_x",
    "input_gradient",
    "input_names",
    "labels_for_loss",
    "logits_model",
    "member_forward",
    "member_gradient_norms",
    "n_outputs",
    "output_index",
    "output_shape",
    "outputs_are_logits",
    "predict_batched",
    "predict_classes",
    "preprocessed",
    "resolve_loss",
    "row_shape",
    "select_output",
    "training_kwargs",
    "weight_gradients",
    "weighted_vote",
]
