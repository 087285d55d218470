"""fp8 weight storage (issue #18): fp8-scaled files stay in e4m3 and give bitwise the dequantized results."""

from __future__ import annotations

import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.models.fp8 import FP8_DTYPE, FP8WeightLinear
from inferix_core.models.registry import load_world_model
from inferix_core.models.wan.checkpoint import save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from tests.fixture_utils import FIXTURES
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=3)
VAE = str(FIXTURES / "wan_vae_tiny.safetensors")


def _block_bytes(wm) -> int:
    return sum(t.nbytes for t in [*wm.transformer.blocks.parameters(), *wm.transformer.blocks.buffers()])


def _video(wm):
    ctx = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    return generate_video(wm, ctx, num_blocks=2, width=48, height=32, seed=0).latents


def test_fp8_scaled_file_keeps_its_values_and_gives_the_dequantized_output(tmp_path):
    path = tmp_path / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(CFG, seed=7), path, layout="comfyui", config=CFG, fp8_scaled=True)
    dequantized = load_world_model(str(path), vae_path=VAE, device="cpu")
    stored = load_world_model(str(path), vae_path=VAE, device="cpu", fp8_weights=True)
    layers = [m for m in stored.transformer.modules() if isinstance(m, FP8WeightLinear)]
    assert len(layers) == CFG.num_layers * 10  # q k v o twice + ffn in/out
    assert all(m.weight.dtype == FP8_DTYPE for m in layers)
    assert "fp8 weights: 30 block linear layers stored in e4m3" in stored.describe()
    # e4m3 block weights: 1 byte + a float32 scale per row instead of 4 bytes (fp32 model)
    assert _block_bytes(stored) < 0.4 * _block_bytes(dequantized)
    a, b = _video(dequantized), _video(stored)
    assert torch.isfinite(a).all()
    assert torch.equal(a, b)


def test_other_files_are_quantized_at_load_within_fp8_error(tmp_path):
    path = tmp_path / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(CFG, seed=7), path, layout="comfyui", config=CFG)
    full = load_world_model(str(path), vae_path=VAE, device="cpu")
    stored = load_world_model(str(path), vae_path=VAE, device="cpu", fp8_weights=True)
    a, b = _video(full), _video(stored)
    rel = ((a - b).norm() / a.norm()).item()
    assert 0 < rel < 0.05, rel  # e4m3 rounding of every block weight; 0 would mean nothing was quantized


def test_from_stored_rejects_a_wrong_scale():
    w = torch.randn(32, 16).to(FP8_DTYPE)
    with pytest.raises(ValueError, match="1 or 32 values"):
        FP8WeightLinear.from_stored(w, torch.ones(5), None)
