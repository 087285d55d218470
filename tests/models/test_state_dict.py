"""inferix_core.models.state_dict: a world model from in-memory weights equals the one loaded from a file."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.errors import CheckpointLayoutError
from inferix_core.models.registry import load_world_model
from inferix_core.models.state_dict import world_model_from_state_dict
from inferix_core.models.wan.checkpoint import save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=24, text_len=8, num_heads=2, num_layers=2)


def test_comfyui_prefixed_weights_build_the_same_transformer_as_the_file(tmp_path):
    state = random_wan_state_dict(CFG, seed=3)
    path = tmp_path / "causal_wan.safetensors"
    save_wan_checkpoint(state, path, layout="comfyui", config=CFG)
    from_file = load_world_model(str(path), device="cpu", dtype="fp32")
    # what a ComfyUI ModelPatcher's get_key_patches('diffusion_model.') yields
    memory = world_model_from_state_dict(
        {f"diffusion_model.{k}": v for k, v in state.items()},
        family="causvid",
        num_heads=CFG.num_heads,
        text_len=CFG.text_len,
        device="cpu",
        dtype="fp32",
    )
    assert memory.family == "causvid" and memory.config == from_file.config
    ours, theirs = memory.transformer.state_dict(), from_file.transformer.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert all(torch.equal(ours[k], state[k]) for k in state)


def test_image_to_video_and_leftover_fp8_scales_are_refused():
    state = random_wan_state_dict(CFG, seed=4)
    scaled = {**state, "blocks.0.self_attn.q.scale_weight": torch.ones(())}
    with pytest.raises(CheckpointLayoutError, match="dequantise"):
        world_model_from_state_dict(scaled, num_heads=2, text_len=8, device="cpu")
    i2v = {**state, "img_emb.proj.0.weight": torch.ones(1280), "img_emb.proj.0.bias": torch.ones(1280)}
    with pytest.raises(CheckpointLayoutError, match="missing"):  # an incomplete image branch
        world_model_from_state_dict(i2v, num_heads=2, text_len=8, device="cpu")


def test_wan21_i2v_weights_need_their_family():
    from inferix_core.errors import ConfigError
    from inferix_core.models.wan.causal_transformer import CausalWanTransformer

    cfg = dataclasses.replace(CFG, model_type="i2v", in_dim=36, has_image_input=True, clip_dim=16)
    state = {k: torch.randn_like(v) for k, v in CausalWanTransformer(cfg).state_dict().items()}
    with pytest.raises(ConfigError, match="set family wan21_i2v"):
        world_model_from_state_dict(state, num_heads=cfg.num_heads, text_len=cfg.text_len, device="cpu")
    world = world_model_from_state_dict(state, family="wan21_i2v", num_heads=cfg.num_heads, text_len=cfg.text_len,
                                        device="cpu")  # fmt: skip
    assert world.config == cfg and all(torch.equal(world.transformer.state_dict()[k], v) for k, v in state.items())
