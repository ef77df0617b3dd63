"""The layering of src/gradkit (docs/layout.md), held by parsing every import, function-level ones too.

Rules: a module imports no gradkit package of a higher rank; it reaches into no other package's private
module (`gradkit.pkg._mod`); only `gradkit/backend/` imports tensorflow, jax or torch; no import cycle
between modules; a module of `attacks/` (one attack family, read top to bottom) at most 600 lines, every
other file at most 300; no `# fmt: skip` packing.
"""

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "gradkit"
RANKS = {
    "errors": 0,
    "_checks": 0,
    "_io": 0,
    "_keras_internals": 0,
    "_quiet": 0,
    "_robustness_lines": 0,
    "backend": 1,
    "plotting": 1,
    "_diagnostic_plots": 1,
    "gradients": 2,
    "monitor": 3,
    "attacks": 3,
    "certificates": 3,
    "evaluation": 4,
    "training": 4,
    "boosting": 5,
    "study": 6,
    "cli": 7,
    "__main__": 8,
    "__init__": 8,
}
FRAMEWORKS = {"tensorflow", "jax", "jaxlib", "torch"}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        yield path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts), parts


def _imports(path, module, is_package):
    """Absolute names imported anywhere in the file (relative imports resolved)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _package(name):
    """'gradkit.attacks.apgd' -> 'attacks'; 'gradkit' -> '__init__'."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges():
    for path, module, parts in _modules():
        for name in set(_imports(path, module, parts[-1] == "__init__")):
            yield path, module, name


def test_every_package_has_a_rank():
    packages = {_package(module) for _, module, _ in _modules()}
    assert packages <= set(RANKS), f"give these a rank in RANKS and docs/layout.md: {packages - set(RANKS)}"


def test_no_import_runs_up_a_layer():
    upward = []
    for _, module, name in _edges():
        if name.split(".")[0] != "gradkit" or name == "gradkit":
            continue
        mine, theirs = _package(module), _package(name)
        if theirs in RANKS and mine != theirs and RANKS[theirs] >= RANKS[mine] and mine != "__init__":
            upward.append(f"{module} imports {name}")
    assert not upward, "\n".join(upward)


def test_no_reach_into_another_package_private_module():
    reaches = []
    for _, module, name in _edges():
        parts = name.split(".")
        if parts[0] != "gradkit" or len(parts) < 3:
            continue
        private = any(p.startswith("_") and not p.startswith("__") for p in parts[2:-1]) or (
            len(parts) >= 3 and parts[2].startswith("_") and not parts[2].startswith("__")
        )
        if private and _package(module) != parts[1]:
            reaches.append(f"{module} imports {name}")
    assert not reaches, "\n".join(reaches)


def test_only_the_backend_imports_the_frameworks():
    leaks = [
        f"{module} imports {name}"
        for path, module, name in _edges()
        if name.split(".")[0] in FRAMEWORKS and _package(module) != "backend"
    ]
    assert not leaks, "\n".join(leaks)


def test_no_import_cycle_between_modules():
    modules = {module for _, module, _ in _modules()}
    graph = {m: set() for m in modules}
    for _, module, name in _edges():
        target = name if name in modules else name.rsplit(".", 1)[0]
        if target in modules and target != module and not module.startswith(target + "."):
            graph[module].add(target)
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            pytest.fail("import cycle: " + " -> ".join(stack[stack.index(node) :] + [node]))
        if node in seen:
            return
        stack.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for node in sorted(graph):
        visit(node)


ATTACK_MODULE_LINES, OTHER_LINES = 600, 300


def test_files_stay_within_their_size_caps():
    long = []
    for p in SRC.rglob("*.py"):
        cap = ATTACK_MODULE_LINES if p.parent.name == "attacks" else OTHER_LINES
        if (n := len(p.read_text().splitlines())) > cap:
            long.append(f"{p.relative_to(SRC)}: {n} lines (cap {cap})")
    assert not long, "\n".join(long)


def test_no_fmt_skip_packing():
    packed = [f"{p.relative_to(SRC)}" for p in SRC.rglob("*.py") if "fmt: skip" in p.read_text()]
    assert not packed, "\n".join(packed)
