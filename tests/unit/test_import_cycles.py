"""No import cycles inside nbaccel/ (nor benchmarks/): an import graph read from the source.

Every ``import`` counts, at module level or inside a function (a lazy import still ties two
layers together). Importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first, so
an import also reaches each package above the module it names, except the importer's own
packages (those are already being imported when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every module of ``package`` under ``root``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement asks for (``from p import m`` asks for ``p.m``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` that importing it runs (see the module docstring)."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported(module, is_package, node):
                parts = name.split(".")
                for end in range(1, len(parts) + 1):
                    target = ".".join(parts[:end])
                    own = module == target or module.startswith(target + ".")
                    if target in modules and not own:
                        edges.add(target)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import path around each cycle: the strongly connected components (Tarjan),
    each shown as a closed path through its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(_closed_path(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path from the component's first module back to itself (breadth first)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not a cycle")


def test_nbaccel_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, "nbaccel")
    assert (
        len(graph) > 50 and "nbaccel.launch.parent.notebook" in graph
    )  # the whole package was read
    found = cycles(graph)
    assert not found, "import cycles in nbaccel/:\n" + "\n".join(" -> ".join(c) for c in found)


def test_benchmarks_have_no_import_cycle() -> None:
    found = cycles(import_graph(ROOT, "benchmarks"))
    assert not found, "import cycles in benchmarks/:\n" + "\n".join(" -> ".join(c) for c in found)


def test_launch_does_not_import_widgets_or_the_accelerator() -> None:
    """The layering rule of DESIGN.md: the launcher sits below both (the dashboard plugs in
    through nbaccel.launch.parent.dashboards from above)."""
    graph = import_graph(ROOT, "nbaccel")
    launch = sorted(m for m in graph if m.startswith("nbaccel.launch"))
    above = ("nbaccel.widgets", "nbaccel.accelerator")
    wrong = [f"{m} -> {t}" for m in launch for t in sorted(graph[m]) if t.startswith(above)]
    assert not wrong, wrong


def test_the_check_finds_a_cycle_made_by_a_function_level_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from .core import run\n")
    (package / "low" / "core.py").write_text(
        "def run():\n    from ..top import draw  # lazy, still a cycle\n    return draw\n"
    )
    (package / "top.py").write_text("from .low import run\n\ndef draw():\n    return run\n")
    found = cycles(import_graph(tmp_path, "pkg"))
    assert found == [["pkg.low", "pkg.low.core", "pkg.top", "pkg.low"]], found
    # and a package importing its own submodules is not a cycle
    (package / "low" / "core.py").write_text("def run():\n    return 1\n")
    assert cycles(import_graph(tmp_path, "pkg")) == []
