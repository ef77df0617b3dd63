"""A small PyTorch CNN on 1x8x8 images, channels first (Conv2d + ReLU + MaxPool2d + Linear, 4 classes), the
same network written in Keras with the same weights, and the source of a module file building it (the
CLI's `--torch-module`). PyTorch backend only (the callers skip elsewhere)."""

import numpy as np

INPUT_SHAPE, N_CLASSES = (1, 8, 8), 4

SOURCE = """
import torch


def build(input_shape, n_classes):
    return torch.nn.Sequential(
        torch.nn.Conv2d(input_shape[0], 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * (input_shape[1] // 2) * (input_shape[2] // 2), n_classes),
    )


def build_seeded():
    torch.manual_seed(0)
    return build((1, 8, 8), 4)


def build_softmax():
    return torch.nn.Sequential(build((1, 8, 8), 4), torch.nn.Softmax(dim=1))


def not_a_module():
    return "a string"
"""


def module_namespace():
    """The functions of `SOURCE` (`build`, `build_seeded`: `torch_cnn()`, `build_softmax`, `not_a_module`)."""
    namespace = {}
    exec(compile(SOURCE, "torch_cnn_source", "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def torch_cnn(seed=0):
    """The network of `SOURCE`'s `build`, its weights drawn by `torch.manual_seed(seed)`."""
    import torch

    torch.manual_seed(seed)
    return module_namespace()["build"](INPUT_SHAPE, N_CLASSES)


def keras_twin(net):
    """The same network in Keras layers (channels first; Flatten in the same (C, H, W) order), its weights
    copied from `net` (a conv kernel (out, in, kh, kw) becomes (kh, kw, in, out), a Linear's is
    transposed)."""
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input(INPUT_SHAPE),
            layers.Conv2D(4, 3, padding="same", data_format="channels_first"),
            layers.ReLU(),
            layers.MaxPooling2D(2, data_format="channels_first"),
            layers.Flatten(data_format="channels_last"),  # no transpose: torch's (C, H, W) order
            layers.Dense(N_CLASSES),
        ],
        name="keras_twin",
    )
    conv, linear = net[0], net[4]
    weights = [conv.weight.permute(2, 3, 1, 0), conv.bias, linear.weight.T, linear.bias]
    model.set_weights([np.ascontiguousarray(w.detach().cpu().numpy()) for w in weights])
    return model


def data(net, n=8, seed=0):
    """`(x (n, 1, 8, 8) float32 in [0, 1), y)`: y the net's own predictions, the last point's label
    wrong (so one point is broken by "clean")."""
    import torch

    x = np.random.RandomState(seed).rand(n, *INPUT_SHAPE).astype("float32")
    with torch.no_grad():
        y = net(torch.from_numpy(x)).argmax(dim=1).numpy()
    y[-1] = (y[-1] + 1) % N_CLASSES
    return x, y
