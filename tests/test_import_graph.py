"""The package's modules import each other without a circle (issue 47).

The graph is read from the source with ``ast``, nothing imported: every ``import`` and ``from ... import`` of every
``rl_lightning/**/*.py``, at the top of a module or inside a function, relative ones resolved. Its rules:

- ``import a.b`` is an edge to the module ``a.b``; ``from a import b`` to the module ``a.b`` where there is one,
  else to ``a`` (for a package, its ``__init__.py``: ``from rl_lightning.algos import ALGORITHMS`` is an edge to
  ``rl_lightning/algos/__init__.py``, which imports every algorithm).
- Python runs a package's ``__init__.py`` before any module in it; that implicit import is NOT an edge (every
  module of a package whose ``__init__.py`` re-exports it would otherwise be in a circle with it). So a module
  never names the package ``__init__.py`` above it (``from rl_lightning import algos``): it imports the module
  that defines what it needs, e.g. ``rl_lightning.algos.registry`` for the list of algorithms.
- An import under ``if TYPE_CHECKING:`` is NOT an edge: it never runs, and names a class for annotations only
  (``rl_lightning.hub``'s ``RLModule``). Neither is a module loaded by ``importlib``, by name, at call time
  (``rl_lightning.algos.registry.algorithm_classes``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_lightning"


def _module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name: its ``__init__.py``)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The dotted names a module imports (``from a import b`` as ``a.b``, ``b`` being a module or a name in ``a``),
    with their lines, outside ``if TYPE_CHECKING:`` blocks."""

    def __init__(self, package: str):
        self.package = package  # the package that a relative import starts from
        self.found: list[tuple[str, int]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name, node.lineno) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        self.found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line of the first such import}}`` over the modules of ``package``."""
    modules = _module_names(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        imports = _Imports(name if path.name == "__init__.py" else name.rpartition(".")[0])
        imports.visit(ast.parse(path.read_text(), filename=str(path)))
        graph[name] = {}
        for imported, line in imports.found:
            while imported and imported not in modules:  # a name in a module: that module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                graph[name].setdefault(imported, line)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in graph[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in graph:
        if module not in order:
            visit(module)
    return found


def _describe(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    edges = [
        f"    {module} (line {line}) -> {imported}"
        for module in circle
        for imported, line in graph[module].items()
        if imported in circle
    ]
    return f"  {len(circle)} modules: {', '.join(circle)}\n" + "\n".join(edges)


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    found = circles(graph)
    assert not found, "import circles in rl_lightning:\n" + "\n".join(_describe(graph, circle) for circle in found)


def test_the_graph_holds_the_imports_that_run_wherever_they_stand():
    graph = import_graph(PACKAGE)
    assert "rl_lightning.trust" in graph["rl_lightning.algos._checkpointing"]  # at the top
    assert "rl_lightning.hub" in graph["rl_lightning.algos._sharing"]  # inside a method
    assert "rl_lightning.algos" in graph["rl_lightning"]  # from a package's __init__.py
    assert "rl_lightning.envs._ray_worker" in graph["rl_lightning.envs.ray_vector"]  # from a package, a module
    assert "rl_lightning.algos.base" not in graph["rl_lightning.hub"]  # under TYPE_CHECKING only
    assert "rl_lightning.algos" not in graph["rl_lightning.algos.base"]  # not the implicit __init__.py


def test_a_circle_is_found_and_named(tmp_path):
    """Relative imports, imports inside functions and ``import a.b`` close circles too."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from .sub import b\nA = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    import pkg.c\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\n")
    (package / "d.py").write_text("from .c import x\n")
    graph = import_graph(package)
    assert graph["pkg"] == {"pkg.a": 1}
    assert graph["pkg.a"] == {"pkg.sub.b": 1}
    assert graph["pkg.sub.b"] == {"pkg.c": 2}
    assert graph["pkg.c"] == {}  # TYPE_CHECKING only
    assert graph["pkg.d"] == {"pkg.c": 1}  # a name in a module: that module
    assert circles(graph) == []
    (package / "c.py").write_text("def g():\n    from .sub.b import f\n    from . import a\n")
    found = circles(import_graph(package))
    assert found == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.c (line 3) -> pkg.a" in _describe(import_graph(package), found[0])
