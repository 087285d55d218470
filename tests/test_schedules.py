"""Seconds → blocks (schedules.py) against the decoded video's own frame count, and a prompt schedule run
that switches at the right block, checked by values.

The reference for "where block b starts" is the causal VAE's frame rule (WanVAEConfig.num_frames: 1 + c·(F − 1)
pixel frames from F latent frames), not the formula under test.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.api import PromptSchedule, generate_video, seconds_to_blocks
from inferix_core.engine.schedules import BlockTiming, block_timing
from inferix_core.errors import ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from inferix_core.vae.config import WanVAEConfig
from tests.test_api import tiny_world

VAE = WanVAEConfig()  # c = 4, as every Wan 2.1 model


def decoded_frames(num_blocks: int, n: int) -> int:
    """Pixel frames the causal VAE decodes from num_blocks blocks of n latent frames."""
    return VAE.num_frames(num_blocks * n)


@pytest.mark.parametrize("n,fps", [(3, 16), (2, 16), (1, 24), (4, 10)])
def test_block_starts_are_the_decoded_frame_counts(n, fps):
    timing = BlockTiming(n, VAE.temporal_compression, fps)
    for b in range(12):
        assert timing.start_frame(b) == decoded_frames(b, n)  # block b starts after the frames of b blocks
        assert timing.video_seconds(b) == pytest.approx(decoded_frames(b, n) / fps)


@pytest.mark.parametrize("n,fps", [(3, 16), (2, 16), (1, 24)])
def test_a_time_lands_on_the_nearest_block_start(n, fps):
    timing = BlockTiming(n, VAE.temporal_compression, fps)
    starts = [decoded_frames(b, n) / fps for b in range(400)]
    for i in range(1, 400):
        t = i * 0.0371
        want = min(range(400), key=lambda b: (abs(starts[b] - t), -b))
        assert timing.block_at(t) == want, t


@pytest.mark.parametrize("n,fps", [(3, 16), (2, 16), (1, 24)])
def test_seconds_round_up_to_the_fewest_blocks_that_last_that_long(n, fps):
    timing = BlockTiming(n, VAE.temporal_compression, fps)
    for i in range(1, 300):
        t = i * 0.0529
        blocks = timing.blocks_for(t)
        assert decoded_frames(blocks, n) / fps >= t - 1e-9
        assert blocks == 1 or decoded_frames(blocks - 1, n) / fps < t


def test_world_model_timing_and_seconds_to_blocks():
    wm = tiny_world()  # 2 latent frames per block, Wan VAE (c = 4), 16 fps: blocks start at frames 0, 5, 13, 21
    timing = block_timing(wm)
    assert [timing.start_frame(b) for b in range(4)] == [0, 5, 13, 21]
    # 0.5 s = 8 frames: one block is 5 frames (0.31 s), two are 13 (0.81 s)
    assert [seconds_to_blocks(wm, s) for s in (0.1, 0.3125, 0.5, 13 / 16, 0.82, 2.0)] == [1, 1, 2, 2, 3, 5]
    with pytest.raises(ConfigError, match="positive"):
        seconds_to_blocks(wm, 0)


def test_switch_blocks():
    timing = BlockTiming(2, 4, 16)  # starts at frames 0, 5, 13, 21, 29
    ctx = torch.randn(1, 4, 8)
    entries = [(0.0, ctx), (0.1, ctx), (10 / 16, ctx), (13 / 16, ctx), (24 / 16, ctx)]
    # 0.1 s is nearest block 0, but a switch is never before block 1; frame 10 is nearest 13 (block 2),
    # frame 24 nearest 21 (block 3)
    assert PromptSchedule(tuple(entries)).switch_blocks(4, timing) == [1, 2, 2, 3]
    with pytest.raises(ConfigError, match=r"starts after the video ends \(1\.31 s, 3 blocks\)"):
        PromptSchedule(tuple(entries)).switch_blocks(3, timing)
    with pytest.raises(ConfigError, match="start with an entry at 0"):
        PromptSchedule(((1.0, ctx),))
    with pytest.raises(ConfigError, match="strictly increasing"):
        PromptSchedule(((0.0, ctx), (2.0, ctx), (1.0, ctx)))


def test_prompt_schedule_run_switches_at_the_right_block():
    """A prompt at frame 10 (0.625 s) switches at block 2: blocks 0–1 equal a run under the first prompt only,
    and the whole run equals the pipeline given the switch at block 2 directly (bitwise)."""
    wm = tiny_world()
    g = torch.Generator().manual_seed(5)
    first, second = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    size = dict(num_blocks=4, width=48, height=32, seed=4, decode=False)
    sched = generate_video(wm, PromptSchedule(((0.0, first), (10 / 16, second))), **size).latents
    only_first = generate_video(wm, first, **size).latents
    n = wm.sampling.block_frames
    pipe = BlockDiffusionPipeline(wm.transformer, wm.sampling, wm.default_cache)
    direct = pipe.generate(GenerationRequest(4, 4, 6, first, seed=4, prompt_schedule=[(2, second)]))
    assert torch.equal(sched, direct)
    assert torch.equal(sched[:, : 2 * n], only_first[:, : 2 * n])
    assert (sched[:, 2 * n : 3 * n] - only_first[:, 2 * n : 3 * n]).abs().max() > 1e-3
