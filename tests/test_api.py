"""generate_video end to end on tiny models: streamed decode == full decode, sinks, schedules, errors."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch

from inferix_core.api import PromptSchedule, generate_video, pixels_to_uint8
from inferix_core.cache import KVCacheConfig
from inferix_core.errors import ConfigError
from inferix_core.models.registry import WorldModel
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import SamplingConfig
from inferix_core.sinks import Mp4Sink
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES, read_fixture


def tiny_world(action_names=()) -> WorldModel:
    torch.manual_seed(0)
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2,
                    action_dim=len(action_names))
    tr = CausalWanTransformer(cfg).eval()
    _, t = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    vae = WanVAE.from_state_dict({k[8:]: v for k, v in t.items() if k.startswith("weights.")}).eval()
    return WorldModel("bundled", cfg, SamplingConfig(block_frames=2), KVCacheConfig(), tr, vae,
                      default_context=torch.randn(1, 4, 8), action_names=tuple(action_names), fps=16)


def test_streamed_frames_equal_full_decode_and_reach_the_sink(tmp_path):
    wm = tiny_world()
    path = tmp_path / "out.mp4"
    res = generate_video(wm, "", num_blocks=3, width=48, height=32, seed=1, sinks=[Mp4Sink(path, fps=16)])
    assert res.latents.shape == (1, 6, 16, 4, 6)
    full = pixels_to_uint8(wm.vae.decode(res.latents.permute(0, 2, 1, 3, 4)))
    assert res.frames.shape == full.shape == (1 + 4 * 5, 32, 48, 3)
    assert np.abs(res.frames.astype(int) - full.astype(int)).max() <= 1  # rounding of equal floats
    with av.open(str(path)) as f:
        assert sum(1 for _ in f.decode(video=0)) == res.frames.shape[0]
    assert res.first_frame_seconds is not None and res.first_frame_seconds <= res.seconds


def test_prompt_schedule_and_actions():
    wm = tiny_world(action_names=("left", "right", "straight"))
    a = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=2, actions=["left", "left"], decode=False)
    b = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=2, actions=["left", "right"], decode=False)
    assert torch.equal(a.latents[:, :2], b.latents[:, :2]) and not torch.equal(a.latents, b.latents)
    sched = PromptSchedule(((0.0, torch.randn(1, 4, 8)), (1.0, torch.randn(1, 4, 8))))
    c = generate_video(wm, sched, num_blocks=3, width=48, height=32, seed=2, decode=False, actions=["left"] * 3)
    assert torch.isfinite(c.latents).all()
    with pytest.raises(ConfigError, match="unknown actions"):
        generate_video(wm, "", num_blocks=1, width=48, height=32, actions=["jump"], decode=False)
    with pytest.raises(ConfigError, match="multiples of 16"):
        generate_video(wm, "", num_blocks=1, width=40, height=32, decode=False)
