"""The backend's interface (`gradkit.backend`): every backend folder defines every name, in the same
modules, and the fast paths are None exactly where documented (TensorFlow and JAX).

The other backends' folders are read as source (importing them would import their frameworks); the
running backend's folder is imported and compared with what `gradkit.backend` re-exports.
"""

import ast
import importlib
import pathlib

import keras
import pytest

from gradkit import backend

BACKEND_DIR = pathlib.Path(backend.__file__).resolve().parent
FOLDERS = ("tensorflow", "jax", "torch")
MODULES = ("core", "search", "train_step", "norms", "noise_scale", "distribution", "fast_paths")
FAST_PATHS = ("linf_step", "apgd_linf_step", "linf_window")
WITH_FAST_PATHS = {"torch"}  # documented in gradkit.backend: None on TensorFlow and JAX
CAPABILITIES = {
    "STEPS_RUN_EAGERLY": bool,
    "DATA_PARALLEL": bool,
    "UNSEEDED_LAYERS_DRAW_GLOBALLY": bool,
    "ITERATIONS_IN_STATE_ONCE_BUILT": bool,
    "COUNTER_READABLE_BETWEEN_CALLS": bool,
}
# What `gradkit.backend` adds to its folders' names: the backend's name and the alias of attacks/.
OWN = {"NAME"}
INTERFACE = [name for name in backend.__all__ if name not in OWN]


def _tree(path):
    return ast.parse(path.read_text(), filename=str(path))


def _all_of(tree):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(element) for element in node.value.elts]
    raise AssertionError("no __all__")


def _top_level_names(tree):
    """Names bound at the top level of a module: defs, classes, assignments and imports."""
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom):
            names.update({(alias.asname or alias.name): node for alias in node.names})
    return names


def _source_of(module):
    """The file of `gradkit.backend.<...>` named `module`."""
    parts = module.split(".")[2:]
    path = BACKEND_DIR.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_backend_folder_defines_every_name_in_the_same_modules(folder):
    for module in MODULES:
        assert (BACKEND_DIR / folder / f"{module}.py").is_file(), f"{folder}/{module}.py"
    init = _tree(BACKEND_DIR / folder / "__init__.py")
    assert _all_of(init) == INTERFACE
    imported = _top_level_names(init)
    for name in INTERFACE:
        node = imported.get(name)
        assert isinstance(node, ast.ImportFrom), f"{folder}/__init__.py does not import {name}"
        defined = _top_level_names(_tree(_source_of(node.module)))
        assert name in defined, f"{node.module} does not define {name}"
        if node.module.startswith(f"gradkit.backend.{folder}."):
            assert node.module.rsplit(".", 1)[1] in MODULES + ("trace", "modules"), node.module


@pytest.mark.parametrize("folder", FOLDERS)
def test_fast_paths_are_none_exactly_where_documented(folder):
    defined = _top_level_names(_tree(BACKEND_DIR / folder / "fast_paths.py"))
    for name in FAST_PATHS:
        node = defined[name]
        if folder in WITH_FAST_PATHS:
            assert isinstance(node, ast.FunctionDef), f"{folder}: {name}"
        else:
            assert isinstance(node, ast.Assign) and ast.literal_eval(node.value) is None, f"{folder}: {name}"
    assert "None on TensorFlow and JAX" in backend.__doc__


def test_the_running_backend_is_its_folder_re_exported():
    folder = importlib.import_module(f"gradkit.backend.{keras.backend.backend()}")
    assert backend.NAME == keras.backend.backend()
    for name in INTERFACE:
        assert getattr(backend, name) is getattr(folder, name), name
    for name in FAST_PATHS:
        assert (getattr(backend, name) is None) == (backend.NAME not in WITH_FAST_PATHS), name
    for name, kind in CAPABILITIES.items():
        assert isinstance(getattr(backend, name), kind), name
    assert (backend.wrap_module is None) == (backend.NAME != "torch")  # torch.nn.Modules: PyTorch only
    assert backend.ROW_QUANTUM is None or (isinstance(backend.ROW_QUANTUM, int) and backend.ROW_QUANTUM > 0)


def test_the_interface_is_documented_once_and_chosen_without_defaults():
    tree = _tree(BACKEND_DIR / "__init__.py")
    for name in backend.__all__:
        assert f"`{name}" in backend.__doc__, f"{name} is not documented in gradkit.backend"
    calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "getattr" not in calls
    assert set(CAPABILITIES) | {"ROW_QUANTUM"} <= set(backend.__all__)
