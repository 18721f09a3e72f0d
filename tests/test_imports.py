"""The package's layering, read from the source with ``ast`` (nothing is imported).

A unit is a subpackage (``nn``, ``models``, ...) or a top-level module (``config``,
``cli``, ...); ``__init__`` stands for the package itself. Imports under
``if TYPE_CHECKING:`` are ignored, imports inside functions count.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = "scratchformer"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE
ROOT_UNIT = "registry"
"""The names of a model's parts, declared for ``config`` and registered into by ``nn``."""
LEAVES = ("version", "errors", "caches", "config", "io", "metrics", "predictions", "nn")
LAYERS = (
    (ROOT_UNIT,),
    LEAVES,
    ("models", "data", "device"),
    ("inference", "interop"),
    ("tasks",),
    ("training", "viz"),
    ("run",),
    ("demo", "serve"),
    ("commands",),
    ("__init__",),
    ("cli",),
    ("__main__",),
)
"""The package from the bottom up: a unit imports only from layers below its own."""
LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _runtime_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements in ``node`` outside ``if TYPE_CHECKING:`` blocks."""
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return [found for child in node.orelse for found in _runtime_imports(child)]
    found = [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
    for child in ast.iter_child_nodes(node):
        found.extend(_runtime_imports(child))
    return found


def _imported_modules(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.module == "__future__":
            continue
        base = package.split(".")
        if node.level:
            base = base[: len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:  # ``from . import x``: x may be a submodule
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if _is_module(submodule) else source)
    return {t for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@cache
def _graph() -> dict[str, dict[str, set[str]]]:
    """Unit -> imported unit -> the importing modules, with what they import."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(_module_name(path))
        edges = graph.setdefault(unit, {})
        for target in _imported_modules(path):
            if _unit(target) != unit:
                edges.setdefault(_unit(target), set()).add(f"{_module_name(path)} -> {target}")
    return graph


def _cycles() -> list[list[str]]:
    """Every strongly connected set of more than one unit (Tarjan's algorithm)."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for target in graph.get(unit, {}):
            if target not in index:
                visit(target)
                low[unit] = min(low[unit], low[target])
            elif target in stack:
                low[unit] = min(low[unit], index[target])
        if low[unit] == index[unit]:
            component = []
            while not component or component[-1] != unit:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return found


def test_the_graph_sees_the_package() -> None:
    graph = _graph()
    assert {"nn", "models", "config", "tasks", "training", "cli"} <= set(graph)
    assert "nn" in graph["models"] and "config" in graph["models"]


@pytest.mark.parametrize("leaf", LEAVES)
def test_low_modules_import_nothing_from_the_package_but_the_registry(leaf: str) -> None:
    assert set(_graph().get(leaf, {})) <= {ROOT_UNIT}


def test_the_registry_imports_only_the_standard_library() -> None:
    """``config`` imports it, and must import without torch (as the command line will)."""
    imports = _runtime_imports(ast.parse((ROOT / f"{ROOT_UNIT}.py").read_text(encoding="utf-8")))
    modules = {
        alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names
    }
    modules |= {node.module for node in imports if isinstance(node, ast.ImportFrom) and node.module}
    assert {module.split(".")[0] for module in modules} <= sys.stdlib_module_names


def test_every_unit_has_a_layer() -> None:
    assert set(_graph()) == set(LAYER)


@pytest.mark.parametrize("unit", sorted(LAYER))
def test_units_import_only_from_lower_layers(unit: str) -> None:
    upward = {
        target: why
        for target, why in _graph().get(unit, {}).items()
        if LAYER[target] >= LAYER[unit]
    }
    assert upward == {}


def test_no_import_cycle_between_units() -> None:
    cycles = {
        " <-> ".join(cycle): sorted(why for unit in cycle for why in _edges_within(unit, cycle))
        for cycle in _cycles()
    }
    assert cycles == {}


def _edges_within(unit: str, cycle: list[str]) -> list[str]:
    return [why for target, whys in _graph()[unit].items() if target in cycle for why in whys]
