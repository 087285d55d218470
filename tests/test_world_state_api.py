"""`generate_video(world_state=..., keep_world_state=True)`: a generation continues a saved world, bitwise.

A world kept after a run and continued for m blocks equals the same world continued in two calls
(1 + (m − 1) blocks, the state kept in between), latents and decoded frames, with per-block actions, a new
prompt at the first resumed block (a hard switch, and LongLive's window re-cache from the saved
history), and through a file. Another size, cache or model family is refused with the difference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.cache import KVCacheConfig
from inferix_core.engine.world_state import WorldState, read_world_state, write_world_state
from inferix_core.errors import ConfigError
from tests.test_api import tiny_world

W, H = 48, 32
ACTIONS = ("none", "left", "right")
CACHE = KVCacheConfig(window_frames=4, sink_frames=0)


def _world(family="bundled"):
    return dataclasses.replace(tiny_world(ACTIONS), family=family)


def _prompts():
    g = torch.Generator().manual_seed(4)
    return torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)


def _gen(wm, prompt, blocks, actions, state=None, keep=True):
    return generate_video(wm, prompt, num_blocks=blocks, width=W, height=H, seed=3, cache=CACHE, actions=actions,
                          world_state=state, keep_world_state=keep)  # fmt: skip


@pytest.mark.parametrize("family", ["bundled", "longlive"])  # longlive: a prompt switch re-caches the window
def test_continuing_in_two_calls_equals_one_call(tmp_path, family):
    wm = _world(family)
    p1, p2 = _prompts()
    first = _gen(wm, p1, 3, ["left", "none", "right"])
    assert first.world_state.next_block == 3
    acts = ["right", "left", "left"]
    once = _gen(wm, p2, 3, acts, first.world_state)  # a new prompt from the first resumed block
    path = write_world_state(tmp_path / "w.safetensors", first.world_state)
    a = _gen(_world(family), p2, 1, acts[:1], read_world_state(path))  # a fresh model object, through a file
    b = _gen(wm, p2, 2, acts[1:], a.world_state)  # the same prompt as saved: no switch
    assert torch.isfinite(once.latents).all()
    assert torch.equal(once.latents, torch.cat([a.latents, b.latents], dim=1))
    assert np.array_equal(once.frames, np.concatenate([a.frames, b.frames]))
    assert once.frames.shape[0] == 3 * 2 * 4  # resumed decoding: no warm-up frames dropped again
    assert b.world_state.next_block == 6
    same = _gen(wm, p1, 3, acts, first.world_state)
    assert not torch.equal(same.latents, once.latents)  # the prompt switch reached the model
    if family == "longlive":  # the switch re-cached the window from the saved history: not a hard switch
        header = {**first.world_state.header, "extra": {**first.world_state.header["extra"], "history": []}}
        hard = _gen(wm, p2, 3, acts, WorldState(header, first.world_state.tensors))
        assert first.world_state.header["extra"]["history"]
        assert not torch.equal(hard.latents, once.latents)


def test_resume_refusals_name_the_difference():
    wm = _world()
    p1, _ = _prompts()
    state = _gen(wm, p1, 2, None).world_state
    with pytest.raises(ConfigError, match="set width and height"):
        generate_video(wm, p1, num_blocks=1, width=W + 16, height=H, world_state=state, cache=CACHE)
    with pytest.raises(ConfigError, match=r"window_frames: saved 4, here 6"):
        generate_video(wm, p1, num_blocks=1, width=W, height=H, world_state=state,
                       cache=KVCacheConfig(window_frames=6))  # fmt: skip
    with pytest.raises(ConfigError, match="'bundled' model"):
        generate_video(_world("longlive"), p1, num_blocks=1, width=W, height=H, world_state=state, cache=CACHE)
