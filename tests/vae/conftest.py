"""Shared VAE fixtures: every Wan 2.1 VAE fixture in tests/fixtures (told by content), loaded once per session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inferix_core.vae import WanVAE
from tests.fixture_utils import files_of_kind

FIXTURES = files_of_kind("wan_vae")


class VAEFixture:
    """A fixture file: its tensors, its `info` metadata, the model built from its weights, and its full decode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tensors = load_file(str(path))
        self.info = json.loads(safe_open(str(path), "pt").metadata()["info"])
        self.vae = WanVAE.from_file(path)
        self._decoded: torch.Tensor | None = None

    @property
    def decoded(self) -> torch.Tensor:
        """Our full decode of `z` with the fixture's settings, computed once (streamed decodes compare with it)."""
        if self._decoded is None:
            step = self.info["decode"]["latent_frames_per_decoder_call"]
            self._decoded = self.vae.decode(self.tensors["z"], latent_frames_per_step=step)
        return self._decoded


_CACHE: dict[Path, VAEFixture] = {}


@pytest.fixture(params=FIXTURES, ids=[p.name for p in FIXTURES], scope="session")
def vae_fixture(request) -> VAEFixture:
    if request.param not in _CACHE:
        _CACHE[request.param] = VAEFixture(request.param)
    return _CACHE[request.param]
