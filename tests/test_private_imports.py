"""No module of the pack imports another module's private names (issue #43).

A private name (one leading underscore, not a dunder) is free to change with its own module; importing it from
another module ties the two together behind the public surface. The AST is read, so imports split over lines,
inside functions and relative ones all count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("inferix_core", "nodes")


def private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    found.append(
                        f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {name}"
                    )
    return found


def package_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_private_name_is_imported_across_modules():
    found = [line for path in package_files() for line in private_imports(path)]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_scan_sees_a_private_import_split_over_lines(tmp_path):
    """The scan itself must catch the multi-line and function-local forms the line-based check missed."""
    probe = ROOT / "inferix_core" / "_probe_private_import.py"
    probe.write_text("def f():\n    from .models.registry import (\n        load_vae,\n        _hidden,\n    )\n")
    try:
        assert [s.split(": ", 1)[1] for s in private_imports(probe)] == ["from .models.registry import _hidden"]
    finally:
        probe.unlink()


if __name__ == "__main__":
    pytest.main([__file__])
