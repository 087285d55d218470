"""No import cycle among the modules of one package of inferix_core (issue #43).

tests/test_import_graph.py keeps the subpackages in layers; inside a package the modules may import each other
freely, but never in a circle: a circle is one module spread over several files, each half-understood alone.
Every import counts (at module level, lazily inside a function, under `if TYPE_CHECKING:`), read with `ast`.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_import_graph import CORE, ROOT, imports, module_name

# Packages whose circle is known and is not yet broken; each names its circle. Empty is the goal.
KNOWN_CYCLES: dict[str, str] = {}


def package_graph(root: Path = ROOT, core: Path = CORE) -> dict[str, dict[str, dict[str, int]]]:
    """package → module → {imported module of the same package: line}."""
    modules = {module_name(p, root)[0]: p for p in core.rglob("*.py") if p.name != "__main__.py"}
    graphs: dict[str, dict[str, dict[str, int]]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graphs.setdefault(package, {}).setdefault(module, {})
        for line, target, _lazy in imports(path, root):
            while target and target not in modules:  # `from .m import name` names m.name: climb to m
                target = target.rpartition(".")[0]
            if target and target != module and target.rpartition(".")[0] == package and path.name != "__init__.py":
                edges.setdefault(target, line)
    return graphs


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    edges = [f"{a}:{graph[a][b]} -> {b}" for a in component for b in graph.get(a, {}) if b in component]
    return "; ".join(edges)


def test_no_import_cycle_inside_a_package():
    bad = []
    for package, graph in sorted(package_graph().items()):
        for component in cycles(graph):
            if package not in KNOWN_CYCLES:
                bad.append(f"{package}: {describe(component, graph)}")
    assert not bad, "import cycles inside a package:\n" + "\n".join(bad)


def test_the_known_cycles_are_still_there():
    """An allow-list entry goes when its circle is broken, so the list never hides a new one."""
    graphs = package_graph()
    stale = [p for p in KNOWN_CYCLES if not cycles(graphs.get(p, {}))]
    assert not stale, f"no cycle left in {stale}: remove them from KNOWN_CYCLES"


def test_vae_has_no_cycle():
    """The seven-file circle of vae/ (config -> memory -> wan_vae -> wan22_vae -> ...) is broken for good."""
    assert "inferix_core.vae" not in KNOWN_CYCLES
    assert cycles(package_graph()["inferix_core.vae"]) == []


def test_the_scan_sees_a_lazy_and_a_type_checking_cycle(tmp_path):
    """The test itself can fail: a lazy import one way and a TYPE_CHECKING import the other make a circle."""
    pkg = tmp_path / "inferix_core" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    return g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\ng = 1\n")
    (pkg / "c.py").write_text("from . import a\n")
    graph = package_graph(tmp_path, tmp_path / "inferix_core")["inferix_core.pkg"]
    assert cycles(graph) == [["inferix_core.pkg.a", "inferix_core.pkg.b"]]
