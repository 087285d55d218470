"""What the Comfy Registry / ComfyUI-Manager read from the repository: [tool.comfy], URLs, the license file."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]


def test_pyproject_has_the_registry_fields_and_the_license_file():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    comfy = project["tool"]["comfy"]
    assert comfy["PublisherId"] and comfy["DisplayName"] and comfy["Icon"].startswith("https://")
    assert project["project"]["urls"]["Repository"].startswith("https://")
    assert project["project"]["license"] == {"file": "LICENSE"}
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:3] == ["Apache", "License", "Version"] and "END OF TERMS AND CONDITIONS" in text
    icon = comfy["Icon"].split("/main/", 1)[1]
    assert (REPO / icon).is_file(), f"the Icon URL names {icon}, which the repository must hold"
