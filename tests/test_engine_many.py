"""Engine.step_many and Engine.fork: many streams through the one engine, each decoded to its own sinks.

A stream stepped with others (one batch per model call) must equal the same stream stepped alone through
Engine.step, up to the batch's float32 matmul rounding; a sink that raises StreamStopped stops its stream alone.
Fresh random weights and prompts (tests/test_api.tiny_world: a tiny Wan transformer and the fixture's Wan VAE).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.engine import BlockInput, Engine
from inferix_core.engine.forks import Future
from inferix_core.errors import ConfigError, StreamStopped
from inferix_core.pipeline.streams import new_arena
from tests.test_api import tiny_world
from tests.test_engine import H, ListSink, W

BLOCKS = 4  # two-frame blocks: the 6-frame window with a 2-frame sink rolls from block 3 on


def _world():
    wm = tiny_world()
    return dataclasses.replace(wm, default_cache=KVCacheConfig(window_frames=6, sink_frames=2, page_frames=2))


def _prompts(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(23)
    return [torch.randn(1, 4, 8, generator=g) for _ in range(n)]


def _bound(reference: torch.Tensor) -> float:
    # float32 sums over a batch of 1 or 3 rows may be blocked differently: a few ulps of the values' own scale
    # through the model's layers and steps; 1e-5 of the largest value is ~100 ulps at float32 (2**-23 ~ 1.2e-7)
    return 1e-5 * float(reference.abs().max())


def test_step_many_equals_each_stream_stepped_alone():
    wm, prompts = _world(), _prompts(3)
    engine = Engine(wm)
    arena = new_arena(engine.pipeline, H, W)
    sinks = [ListSink() for _ in prompts]
    streams = [engine.open(p, H, W, seed=5 + i, arena=arena, sinks=[s], keep_history=False)
               for i, (p, s) in enumerate(zip(prompts, sinks, strict=True))]  # fmt: skip
    many = [engine.step_many(streams) for _ in range(BLOCKS)]
    for i, prompt in enumerate(prompts):
        alone_engine = Engine(wm)
        alone = alone_engine.open(prompt, H, W, seed=5 + i, arena=new_arena(alone_engine.pipeline, H, W))
        for b in range(BLOCKS):
            want = alone_engine.step(alone)
            got = many[b][i]
            assert torch.isfinite(got.latents).all() and got.index == want.index == b
            assert (got.latents - want.latents).abs().max() <= _bound(want.latents)
            # frames: the same latents decoded, within one uint8 level of float rounding
            assert np.abs(got.frames.astype(int) - want.frames.astype(int)).max() <= 1
        # each stream's sink got its own blocks, whole (one write per block), in order
        assert [k for k, _ in sinks[i].blocks] == list(range(BLOCKS))
    # different prompts and seeds give different streams (the batch does not mix its rows)
    assert (many[-1][0].latents - many[-1][1].latents).abs().max() > 1e-2


class StopAt(ListSink):
    def __init__(self, block: int):
        super().__init__()
        self.block = block

    def write(self, frames: np.ndarray, index: int) -> None:
        if index >= self.block:
            raise StreamStopped("consumer too slow")
        super().write(frames, index)


def test_a_sink_that_stops_its_stream_stops_it_alone():
    wm, prompts = _world(), _prompts(2)
    engine = Engine(wm)
    arena = new_arena(engine.pipeline, H, W)
    ok, stops = ListSink(), StopAt(1)
    a = engine.open(prompts[0], H, W, seed=1, arena=arena, sinks=[ok], keep_history=False)
    b = engine.open(prompts[1], H, W, seed=2, arena=arena, sinks=[stops], keep_history=False)
    engine.step_many([a, b])
    assert not a.stopped and not b.stopped
    made = engine.step_many([a, b])
    assert b.stopped == "consumer too slow" and not a.stopped
    assert made[1].frames is None and made[0].frames is not None
    assert [k for k, _ in ok.blocks] == [0, 1] and [k for k, _ in stops.blocks] == [0]


@pytest.mark.parametrize("rope_offset", [0.0, 7.0])
def test_fork_futures_step_as_the_parent_would(rope_offset):
    """A future with no seed continues the parent's noise: stepped batched beside another future, it equals the
    parent stepped on alone (a copy of the stream before the fork, the same pages). A stream whose RoPE positions
    are shifted (LongLive 2.0's shots) forks at the same positions."""
    wm, (prompt, other) = _world(), _prompts(2)
    engine = Engine(wm)
    parent = engine.open(prompt, H, W, seed=9, arena=new_arena(engine.pipeline, H, W), keep_history=False)
    twin_engine = Engine(wm)
    twin = twin_engine.open(prompt, H, W, seed=9, arena=new_arena(twin_engine.pipeline, H, W))
    parent.state.rope_offset = twin.state.rope_offset = rope_offset
    for _ in range(2):
        engine.step(parent)
        twin_engine.step(twin)
    same, changed = engine.fork(parent, [Future(), Future(context=other, seed=4)])
    for _ in range(2):
        got, other_block = engine.step_many([same, changed])
        want = twin_engine.step(twin)
        assert (got.latents - want.latents).abs().max() <= _bound(want.latents)
        assert (other_block.latents - want.latents).abs().max() > 1e-2
        assert np.abs(got.frames.astype(int) - want.frames.astype(int)).max() <= 1  # its own fork of the decoder


def test_what_many_streams_refuse():
    wm, (prompt,) = _world(), _prompts(1)
    engine = Engine(wm)
    plain = engine.open(prompt, H, W)
    with pytest.raises(ConfigError, match="page arena"):
        engine.fork(plain, [Future()])
    adopted = engine.adopt(plain)
    with pytest.raises(ConfigError, match="one stream at a time"):
        engine.step_many([adopted], [BlockInput(context=prompt, recache="window")])
    with pytest.raises(ConfigError, match="2 block inputs for 1 streams"):
        engine.step_many([adopted], [BlockInput(), BlockInput()])
    bare = Engine(pipeline=engine.pipeline)
    assert bare.new_decoder() is None  # a bare pipeline keeps latents only
    with pytest.raises(ConfigError, match="bare pipeline"):
        bare.plan(48, 32, 2)


def test_action_rows_count_from_the_origin_or_take_absolute_frames():
    """A fork's rows count from its fork point, a stream's from frame 0; a function gets absolute frames; too few
    rows are refused naming the rows needed."""
    from inferix_core.engine.forks import action_rows
    from inferix_core.errors import ShapeMismatchError

    rows = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(action_rows(rows, 10, 2, origin=8), rows[:, 2:4])  # a fork at frame 8: rows 2, 3
    assert torch.equal(action_rows(rows, 4, 2), rows[:, 4:6])  # a stream: rows 4, 5
    assert torch.equal(action_rows(lambda start, n: rows[:, start - 10 : start - 10 + n], 10, 2), rows[:, 0:2])
    assert action_rows(None, 4, 2) is None
    with pytest.raises(ShapeMismatchError, match=r"needs rows 5\.\.6"):
        action_rows(rows, 5, 2, who="stream 'a'")
