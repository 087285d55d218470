"""load_world_model: a checkpoint file + VAE file become one WorldModel that generates."""

from __future__ import annotations

import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.errors import ConfigError, MissingFileError
from inferix_core.models.registry import get_family, list_families, load_world_model
from inferix_core.models.wan.checkpoint import save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from tests.fixture_utils import FIXTURES
from tests.models.wan_state import random_wan_state_dict


def test_checkpoint_and_vae_load_into_a_working_model(tmp_path):
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2)
    path = tmp_path / "longlive_tiny.safetensors"
    save_wan_checkpoint(random_wan_state_dict(cfg, seed=3), path, layout="comfyui", config=cfg)
    wm = load_world_model(str(path), vae_path=str(FIXTURES / "wan_vae_tiny.safetensors"), device="cpu")
    assert wm.family == "longlive"  # from the file name
    assert wm.default_cache == get_family("longlive").cache
    assert wm.config.num_heads == 2 and wm.dtype == torch.float32
    assert "longlive" in wm.describe()
    res = generate_video(wm, torch.randn(1, 4, 8), num_blocks=1, width=48, height=32, seed=0)
    assert res.frames.shape == (9, 32, 48, 3)
    assert torch.isfinite(res.latents).all()


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(MissingFileError, match="does not exist"):
        load_world_model(str(tmp_path / "nope.safetensors"), device="cpu")
    with pytest.raises(ConfigError, match="unknown model family"):
        get_family("sora")
    with pytest.raises(ConfigError, match="unknown dtype"):
        load_world_model("x", dtype="fp64", device="cpu")
    assert "self_forcing" in list_families()
