"""Krea's keep_first_frame=False worlds: the pixel window the first context frame is re-encoded from is saved.

A world saved after the KV window has rolled (so the next block re-encodes the oldest kept pixel frame) and
resumed in a fresh pipeline equals never stopping, bitwise (CPU fp32, the tiny Wan and tiny Wan VAE): at the
stream level, and through `generate_video` (continued 3 blocks in one call = 1 + 2 through a file, latents and
the loop-decoded frames). A world without the window (saved before) is refused with the fix.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.cache import KVCacheConfig
from inferix_core.engine.world_state import (
    WorldState,
    capture_world_state,
    load_world_state,
    model_identity,
    read_world_state,
    write_world_state,
)
from inferix_core.errors import ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig
from inferix_core.vae.pixel_window import PixelWindowEncoder
from tests.test_api import tiny_world

KREA = SamplingConfig((1000, 500), block_frames=2, kv_recompute_frames=2, keep_first_frame=False)


def _pipe(wm):
    return BlockDiffusionPipeline(wm.transformer, KREA, KVCacheConfig(), PixelWindowEncoder(wm.vae, 2))


def test_a_resumed_reencoding_stream_equals_never_stopping(tmp_path):
    wm = tiny_world()
    prompt = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(5))
    pipe = _pipe(wm)
    state = pipe.start_stream(prompt, 4, 6, seed=3)
    for _ in range(3):  # rolled: the next block re-encodes the window's oldest frame
        pipe.denoise_block(state)
    ident = model_identity(wm.transformer, "krea")
    world = capture_world_state(pipe, state, identity=ident)
    assert world.header["pixel_window"]["frames"] == pipe.first_frame_encoder.max_frames
    path = write_world_state(tmp_path / "w.safetensors", world)
    want = [pipe.denoise_block(state).latents for _ in range(2)]
    other = _pipe(tiny_world())
    resumed = load_world_state(read_world_state(path), other, identity=ident)
    got = [other.denoise_block(resumed).latents for _ in range(2)]
    assert all(torch.isfinite(g).all() for g in got)
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)
    bare = WorldState({**world.header, "pixel_window": None}, world.tensors)
    with pytest.raises(ConfigError, match="no pixel window"):
        load_world_state(bare, _pipe(wm), identity=ident)


def test_generate_video_continues_a_reencoding_world():
    wm = dataclasses.replace(tiny_world(), family="krea", sampling=KREA)
    kw = dict(width=48, height=32, seed=2, keep_world_state=True)
    first = generate_video(wm, "", num_blocks=3, **kw)
    once = generate_video(wm, "", num_blocks=3, world_state=first.world_state, **kw)
    a = generate_video(wm, "", num_blocks=1, world_state=first.world_state, **kw)
    b = generate_video(wm, "", num_blocks=2, world_state=a.world_state, **kw)
    assert torch.isfinite(once.latents).all()
    assert torch.equal(once.latents, torch.cat([a.latents, b.latents], dim=1))
    assert np.array_equal(once.frames, np.concatenate([a.frames, b.frames]))
