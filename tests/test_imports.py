"""The package's layering, read from the source with ``ast`` (nothing is imported).

A unit is a subpackage (``nn``, ``models``, ...) or a top-level module (``config``,
``cli``, ...); ``__init__`` stands for the package itself. Units import only from the
layers below their own, so no two units import each other. Imports under
``if TYPE_CHECKING:`` are ignored there, imports inside functions count.

Nor do two modules (files), in one unit or not, import each other, directly or through
others: the modules' runtime imports (inside functions too) form no cycle. An import under
``if TYPE_CHECKING:`` (names for annotations only) closes no cycle at run time, but it
still ties its module to the one it imports: ``A`` importing ``B`` so is a cycle all the
same if ``B`` imports ``A`` at run time, directly or through other modules. The one loop
allowed is of such imports only (``A`` and ``B`` naming each other's types under
``if TYPE_CHECKING:``), since neither module then needs the other to run.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection, Mapping
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
    ("models", "data", "device", "kernels"),
    ("inference", "interop"),
    ("tasks",),
    ("training", "viz"),
    ("opening",),
    ("run",),
    ("demo", "serve"),
    ("commands",),
    ("__init__",),
    ("cli",),
    ("__main__",),
)
"""The package from the bottom up: a unit imports only from layers below its own."""
LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}
TRAINER = f"{PACKAGE}.training.trainer"
LAYOUT = f"{PACKAGE}.training.rundir"
LAYOUT_IMPORTS = {f"{PACKAGE}.{name}" for name in ("io", "config", "version", "errors")}
LAYOUT_IMPORTS.add(f"{PACKAGE}.data.tokenizer")
"""What the run directory's layout imports from the package: leaves, and the tokenizer whose
files it reads and writes."""
OPENING_RUNS = ("inference", "interop")
"""The units that opening a run needs (quantization, Hugging Face checkpoints) and that the
training loop, which writes a run through its layout alone, does without."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _path(module: str) -> Path:
    path = ROOT.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _runtime_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements in ``node`` outside ``if TYPE_CHECKING:`` blocks."""
    if _is_type_checking(node):
        return [found for child in node.orelse for found in _runtime_imports(child)]
    found = [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
    for child in ast.iter_child_nodes(node):
        found.extend(_runtime_imports(child))
    return found


def _type_checking_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements in ``node``'s ``if TYPE_CHECKING:`` blocks."""
    if _is_type_checking(node):
        return [
            found
            for child in node.body
            for found in ast.walk(child)
            if isinstance(found, (ast.Import, ast.ImportFrom))
        ]
    return [
        found for child in ast.iter_child_nodes(node) for found in _type_checking_imports(child)
    ]


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported_modules(path: Path, type_checking: bool = False) -> set[str]:
    """The package's modules that ``path`` imports at run time (or, with ``type_checking``,
    under ``if TYPE_CHECKING:``), relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    targets = set()
    for node in _type_checking_imports(tree) if type_checking else _runtime_imports(tree):
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


def _closure(module: str) -> set[str]:
    """The package's modules that importing ``module`` runs: it, what it imports and so on,
    and the packages of each (whose ``__init__`` runs first)."""
    found: set[str] = set()
    waiting = [module]
    while waiting:
        name = waiting.pop()
        if name in found:
            continue
        found.add(name)
        parts = name.split(".")
        waiting += [".".join(parts[:end]) for end in range(1, len(parts))]
        waiting += _imported_modules(_path(name))
    return found


@cache
def _module_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time (or, with ``type_checking``,
    under ``if TYPE_CHECKING:``)."""
    return {
        _module_name(path): _imported_modules(path, type_checking) - {_module_name(path)}
        for path in sorted(ROOT.rglob("*.py"))
    }


@cache
def _graph() -> dict[str, dict[str, set[str]]]:
    """Unit -> imported unit -> the importing modules, with what they import."""
    graph: dict[str, dict[str, set[str]]] = {}
    for module, targets in _module_graph().items():
        edges = graph.setdefault(_unit(module), {})
        for target in targets:
            if _unit(target) != _unit(module):
                edges.setdefault(_unit(target), set()).add(f"{module} -> {target}")
    return graph


def _reaches(graph: Mapping[str, Collection[str]], start: str, goal: str) -> bool:
    """Whether ``goal`` is ``start`` or one of the nodes that ``start``'s edges lead to."""
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def _cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one node of ``graph`` (Tarjan's
    algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_package() -> None:
    graph = _graph()
    assert {"nn", "models", "config", "tasks", "training", "cli"} <= set(graph)
    assert "nn" in graph["models"] and "config" in graph["models"]
    assert f"{PACKAGE}.models.encoder" in _module_graph()[f"{PACKAGE}.models.electra"]


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
        for cycle in _cycles(_graph())
    }
    assert cycles == {}


def _edges_within(unit: str, cycle: list[str]) -> list[str]:
    return [why for target, whys in _graph()[unit].items() if target in cycle for why in whys]


def test_imports_for_annotations_are_read_apart_from_those_that_run() -> None:
    tree = ast.parse(
        "import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
        "def f():\n    import d\n    if typing.TYPE_CHECKING:\n        from e import E\n"
    )

    runtime = sorted(ast.unparse(node) for node in _runtime_imports(tree))
    annotations = sorted(ast.unparse(node) for node in _type_checking_imports(tree))
    assert runtime == ["import a", "import c", "import d"]
    assert annotations == ["from e import E", "import b"]


def test_the_cycle_checks_find_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _reaches(graph, "d", "c") and not _reaches(graph, "a", "d")


def test_no_import_cycle_between_modules() -> None:
    runtime = _module_graph()
    cycles = {
        " <-> ".join(cycle): sorted(
            f"{module} -> {target}" for module in cycle for target in runtime[module] & set(cycle)
        )
        for cycle in _cycles(runtime)
    }
    assert cycles == {}


def test_no_import_for_annotations_hides_a_cycle() -> None:
    """An import under ``if TYPE_CHECKING:`` whose module the imported one reaches through
    runtime imports."""
    runtime = _module_graph()
    hidden = sorted(
        f"{module} -> {target} (TYPE_CHECKING), back at run time"
        for module, targets in _module_graph(type_checking=True).items()
        for target in targets
        if _reaches(runtime, target, module)
    )
    assert hidden == []


def test_the_training_loop_imports_nothing_that_opens_runs() -> None:
    assert {_unit(module) for module in _closure(f"{PACKAGE}.opening")} >= set(OPENING_RUNS)
    assert sorted(m for m in _closure(TRAINER) if _unit(m) in OPENING_RUNS) == []


def test_the_run_directory_layout_imports_only_leaves_and_the_tokenizer() -> None:
    assert _imported_modules(_path(LAYOUT)) <= LAYOUT_IMPORTS
