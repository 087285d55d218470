"""InteractiveSession.save_world / world_state=: a resumed session continues bitwise (CPU, fp32).

With per-block actions (held across the save), prompt switches that re-cache the window before and after
the save (every re-cache style: the saved history is what they re-run; "window_reset" relabels the ring past the save), and the decoder's cache (frames
equal too). A save in the middle of a block is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.clients.session import InteractiveSession
from inferix_core.engine.world_state import read_world_state
from inferix_core.errors import ConfigError
from tests.test_api import tiny_world

ACTIONS = ("left", "right", "straight")
WINDOW = KVCacheConfig(window_frames=6, sink_frames=2)


def _prompts():
    g = torch.Generator().manual_seed(7)
    return {name: torch.randn(1, 4, 8, generator=g) for name in ("start", "beach", "snow")}


def _session(world, prompts, **kw):
    return InteractiveSession(world, "start", width=48, height=32, seed=3, cache=WINDOW,
                              prompt_encoder=prompts.__getitem__, **kw)  # fmt: skip


def _drive(session, plan):
    out = []
    for step in plan:
        for kind, value in step:
            session.send({"type": kind, **({"text": value} if kind == "prompt" else {"name": value})})
        out.append(session.step())
    return out


@pytest.mark.parametrize("style", ["blocks", "window", "window_reset"])
def test_a_resumed_session_continues_bitwise(tmp_path, style):
    world, prompts = tiny_world(ACTIONS), _prompts()
    before = [[("action", "left")], [], [("prompt", "beach"), ("action", "right")], []]
    after = [[], [("prompt", "snow")], [("action", "straight")]]  # the held "right" goes on across the save
    a = _session(world, prompts, recache_style=style)
    _drive(a, before)
    path = a.save_world(tmp_path / "w.safetensors")
    straight = _drive(a, after)
    b = _session(tiny_world(ACTIONS), prompts, recache_style=style, world_state=read_world_state(path))
    assert b.num_blocks == 4 and b.prompt == "beach"
    resumed = _drive(b, after)
    assert a.num_recaches >= 2 and b.num_recaches == 1  # the switch after the save re-cached from the file's history
    assert [x.action for x in resumed] == [x.action for x in straight] == ["right", "right", "straight"]
    for x, y in zip(straight, resumed, strict=True):
        assert torch.equal(x.latents, y.latents) and np.array_equal(x.frames, y.frames)
    assert torch.isfinite(torch.cat([x.latents for x in resumed])).all()


def test_a_save_inside_a_block_is_refused():
    world, prompts = tiny_world(ACTIONS), _prompts()
    session = _session(world, prompts, decode=False)
    session.at_boundary = False  # as after a Ctrl-C inside denoise_block
    with pytest.raises(ConfigError, match="half written"):
        session.capture_world()
