"""The import graph of inferix_core follows the layering documented in docs/architecture.md ("Layers").

Read from the source with `ast` (nothing is imported): every `import` / `from ... import` of an
inferix_core module, at module level or inside a function (a lazy import is still a dependency), must
point from a unit (a subpackage such as `cache`, or a top-level module such as `api.py`) to a unit of a
lower layer. Units of one layer do not import each other. So there is no cycle between subpackages, and a
lazy import cannot hide one. `__main__.py` files are entry points, run and never imported, and may import
anything. The core never imports ComfyUI.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "inferix_core"
COMFY_MODULES = {"comfy", "comfy_extras", "folder_paths", "server", "execution", "nodes"}


def documented_layers() -> dict[str, int]:
    """unit → layer from the ```text block under "## Layers" in docs/architecture.md (one layer a line)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"^## Layers\n.*?```text\n(.*?)```", text, flags=re.S | re.M)
    assert block, 'docs/architecture.md has no "## Layers" section with a ```text block'
    layers: dict[str, int] = {}
    for line in block.group(1).splitlines():
        if line.strip():
            rank, *units = line.split("#")[0].split()
            for unit in units:
                assert unit not in layers, f"{unit} is listed twice in docs/architecture.md"
                layers[unit] = int(rank)
    return layers


def unit_of(module: str) -> str:
    """inferix_core.cache.ring → cache; inferix_core.api → api."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path, root: Path = ROOT) -> tuple[str, str]:
    """(dotted module name, the package relative imports resolve against)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str, bool]]:
    """(line, imported module, lazy) for every import of `path`; lazy = inside a function or class."""
    tree = ast.parse(path.read_text(), filename=str(path))
    _, package = module_name(path, root)
    eager = set()

    def walk_eager(body):
        for node in body:
            eager.add(id(node))
            for field in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(node, field, None)
                if sub and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    walk_eager(sub)

    walk_eager(tree.body)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from . import x` imports the submodule x; `from .m import name` imports m
            targets = [f"{prefix}.{alias.name}" for alias in node.names] if node.module is None else [prefix]
        else:
            continue
        found += [(node.lineno, t, id(node) not in eager) for t in targets]
    return found


SOURCES = sorted(CORE.rglob("*.py"))


def test_every_unit_is_placed_in_a_layer():
    layers = documented_layers()
    units = {p.stem if p.parent == CORE else p.relative_to(CORE).parts[0] for p in SOURCES}
    units -= {"__init__", "__main__"}
    missing = sorted(units - set(layers))
    assert not missing, f"add {missing} to the layer list in docs/architecture.md (## Layers)"
    stale = sorted(set(layers) - units)
    assert not stale, f"docs/architecture.md lists {stale}, which no longer exist"


def violations(sources: list[Path], layers: dict[str, int], root: Path = ROOT) -> list[str]:
    out = []
    for path in sources:
        if path.name == "__main__.py":
            continue  # an entry point: run, never imported
        module, _ = module_name(path, root)
        src = unit_of(module)
        for line, target, lazy in imports(path, root):
            top = target.split(".")[0]
            where = f"{path.relative_to(root)}:{line}"
            if top in COMFY_MODULES:
                out.append(f"{where} imports ComfyUI's {target}; only nodes/ may")
            if top != "inferix_core" or not src:
                continue
            dst = unit_of(target)
            if not dst or dst == src:
                continue
            if layers[dst] >= layers[src]:
                kind = "lazily imports" if lazy else "imports"
                out.append(f"{where}: {src} (layer {layers[src]}) {kind} {target} ({dst}, layer {layers[dst]})")
    return out


def test_imports_point_down_the_layers():
    bad = violations(SOURCES, documented_layers())
    assert not bad, "imports against docs/architecture.md's layers:\n" + "\n".join(bad)


def test_no_cycle_between_subpackages():
    """Stated on its own (it follows from the layers): a cycle names its members, whatever the layer list says."""
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        if path.name == "__main__.py":
            continue
        src = unit_of(module_name(path)[0])
        for _, target, _ in imports(path):
            dst = unit_of(target) if target.startswith("inferix_core.") else ""
            if src and dst and dst != src:
                graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_checker_catches_an_upward_lazy_import(tmp_path):
    """The test itself can fail: a lazy import from models up to pipeline, and one of ComfyUI, are reported."""
    fake = tmp_path / "inferix_core" / "models"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("import folder_paths\n\ndef f():\n    from ..pipeline import BlockDiffusionPipeline\n")
    bad = violations([fake / "bad.py"], documented_layers(), root=tmp_path)
    assert len(bad) == 2, bad
    assert "ComfyUI's folder_paths" in bad[0] and "lazily imports inferix_core.pipeline" in bad[1]
