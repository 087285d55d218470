"""Fixtures for node tests: the node classes (headless, through the V1 shim) and a tiny world model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="session")
def node_classes() -> dict:
    from inferix_nodes import NODE_CLASS_MAPPINGS

    return NODE_CLASS_MAPPINGS


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$INFERIX_MODELS_DIR with the tiny fixture transformer and VAE, as a ComfyUI models/ folder."""
    root = tmp_path / "models"
    (root / "diffusion_models").mkdir(parents=True)
    (root / "vae").mkdir()
    os.symlink(FIXTURES / "causal_wan_tiny.safetensors", root / "diffusion_models" / "causal_wan_tiny.safetensors")
    os.symlink(FIXTURES / "wan_vae_tiny.safetensors", root / "vae" / "wan_vae_tiny.safetensors")
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(root))
    return root


@pytest.fixture
def output_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "output"
    monkeypatch.setenv("INFERIX_OUTPUT_DIR", str(out))
    return out
