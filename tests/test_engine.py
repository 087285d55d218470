"""The Engine owns the block loop: its run, its steps and the headless pipeline loop are one body.

Each test compares two drivers of the same request bitwise (fresh random weights, a windowed cache with a sink,
a prompt switch with LongLive's re-cache), so a lever threaded through one driver and not the other fails here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.engine import BlockInput, Engine
from inferix_core.pipeline import GenerationRequest
from inferix_core.pipeline.loop import RequestInputs
from tests.test_api import tiny_world

H, W, BLOCKS = 4, 6, 5  # latents of a 48x32 frame; 5 two-frame blocks roll a 6-frame window with a 2-frame sink


class ListSink:
    def __init__(self):
        self.blocks: list[tuple[int, np.ndarray]] = []
        self.closed = False

    def write(self, frames: np.ndarray, index: int) -> None:
        self.blocks.append((index, frames))

    def close(self) -> None:
        self.closed = True


def _world():
    wm = tiny_world()
    return dataclasses.replace(wm, default_cache=KVCacheConfig(window_frames=6, sink_frames=2))


def _request(wm, **kw) -> GenerationRequest:
    g = torch.Generator().manual_seed(11)
    first, second = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    return GenerationRequest(BLOCKS, H, W, first, seed=3, prompt_schedule=[(3, second)], recache_on_switch=True, **kw)


def test_engine_run_equals_the_headless_pipeline_stream():
    """Engine.run (decode, sinks, profiler around each block) and BlockDiffusionPipeline.stream (headless) give the
    same latents bitwise: both step the request through pipeline/loop.advance, re-cache at the switch included."""
    wm = _world()
    headless = Engine(wm, decode=False).pipeline.generate(_request(wm))
    engine = Engine(wm)
    sink = ListSink()
    request = _request(wm, final_context_pass=False)
    stream = engine.open_request(request, sinks=[sink])
    result = engine.run(stream, request)
    assert torch.isfinite(result.latents).all()
    assert torch.equal(result.latents, headless)
    # every block reached the sink (the first in two writes: its first frame alone, run_output.decode_to_sinks)
    assert sorted({i for i, _ in sink.blocks}) == list(range(BLOCKS)) and sink.closed
    assert np.array_equal(np.concatenate([f for _, f in sink.blocks]), result.frames)


def test_steps_equal_the_run_and_capture_writes_the_pending_context_pass():
    """Stepping the request's inputs one block at a time (as a client between blocks would) equals Engine.run; a
    block left uncommitted is written by capture(): the captured cache ends where the stream does."""
    wm = _world()
    request = _request(wm, final_context_pass=False)
    engine = Engine(wm, decode=False)
    stream = engine.open_request(request)
    inputs = RequestInputs(engine.pipeline, request)
    n = wm.sampling.block_frames
    steps = [engine.step(stream, inputs.block(i, stream.state.next_frame, n), commit=False) for i in range(BLOCKS)]
    assert stream.state.pending_context is not None  # the last block's K/V not written yet
    world = engine.capture(stream)
    assert stream.state.pending_context is None
    assert world.next_block == BLOCKS
    ran = Engine(wm, decode=False)
    again = _request(wm, final_context_pass=False)
    result = ran.run(ran.open_request(again), again)
    assert torch.equal(torch.cat([b.latents for b in steps], dim=1), result.latents)


def test_switch_prompt_with_recache_equals_the_scheduled_switch():
    """An open-ended stream switched between blocks (Engine.switch_prompt, the session's way) equals the same switch
    scheduled in a request (advance's way): one prompt switch, one re-cache, written once."""
    wm = _world()
    request = _request(wm)
    second = request.prompt_schedule[0][1]
    engine = Engine(wm, decode=False)
    stream = engine.open_request(dataclasses.replace(request, prompt_schedule=[], recache_on_switch=False))
    stream.history = []  # keep the resident blocks, as a request with a re-cache does
    out = []
    for i in range(BLOCKS):
        if i == 3:
            assert engine.switch_prompt(stream, second, "window")  # a re-cache ran
        out.append(engine.step(stream, BlockInput(), commit=False).latents)
    scheduled = Engine(wm, decode=False).pipeline.generate(request)
    assert torch.equal(torch.cat(out, dim=1), scheduled)


def test_run_takes_the_stream_opened_for_its_request():
    """Engine.run reads the per-block inputs open_request decided for its request; another request is refused."""
    wm = _world()
    engine = Engine(wm, decode=False)
    stream = engine.open_request(_request(wm))
    import pytest

    from inferix_core.errors import ConfigError

    with pytest.raises(ConfigError, match="open_request opened for the same request"):
        engine.run(stream, _request(wm))
