"""Read the reference fixtures: discovered by glob, settings taken from each file's `info` metadata."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_files(pattern: str) -> list[Path]:
    return sorted(FIXTURES.glob(pattern))


def read_fixture(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    with safe_open(str(path), "pt") as f:
        info = json.loads(f.metadata()["info"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    return info, tensors


def fixture_weights(path: Path, info: dict, tensors: dict) -> dict[str, torch.Tensor]:
    """`weights.*` of this file, or of the file named by `weights_file`."""
    if "weights_file" in info:
        _, tensors = read_fixture(path.parent / info["weights_file"])
    return {k[len("weights.") :]: v for k, v in tensors.items() if k.startswith("weights.")}
