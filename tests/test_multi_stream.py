"""Many sessions on one device (issue #22): independent streams batched per block, each to its own sink.

CPU, fp32, a tiny random Wan and the tiny Wan VAE fixture. Checked: streams with different prompts,
actions, seeds and positions (one admitted later) each equal their run alone; the planner refuses a
stream that does not fit and says why; a stalled consumer neither stalls the others nor the loop
(drop: its blocks are dropped and counted; stop: its stream stops and its pages are freed); a sink
that raises stops only its own stream.
"""

from __future__ import annotations

import threading

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.clients.multi_stream import MultiStreamEngine, StreamRequest
from inferix_core.errors import CacheBudgetError, ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline
from inferix_core.sinks.base import FrameSink
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES
from tests.test_branching import CFG, H, N, W, _pipe

WINDOW = KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3)


class ListSink(FrameSink):
    def __init__(self, gate: threading.Event | None = None, fail: bool = False):
        self.blocks, self.closed, self.gate, self.fail = [], False, gate, fail

    def write(self, frames, block_index):
        if self.gate is not None:
            self.gate.wait(600)  # a stalled consumer (bounded: the test never hangs; the test opens the gate)
        if self.fail:
            raise OSError("disk full")
        self.blocks.append((block_index, frames.shape))

    def close(self):
        self.closed = True


def _requests(num_blocks=None):
    g = torch.Generator().manual_seed(3)
    return [
        StreamRequest(
            torch.randn(1, 4, 8, generator=g),
            seed=i,
            actions=torch.randn(1, 8 * N, 3, generator=g),
            num_blocks=num_blocks,
            name=f"s{i}",
        )
        for i in range(3)
    ]


def _alone(pipe: BlockDiffusionPipeline, req: StreamRequest, blocks: int) -> torch.Tensor:
    state = pipe.start_stream(req.context, H, W, seed=req.seed)
    return torch.cat(
        [pipe.denoise_block(state, req.actions[:, N * b : N * (b + 1)]).latents for b in range(blocks)], dim=1
    )


@pytest.mark.parametrize("cache", [WINDOW, KVCacheConfig(page_frames=3)], ids=["window_sink", "global"])
def test_streams_at_different_positions_each_equal_their_run_alone(cache):
    pipe = _pipe(cache)
    reqs = _requests(num_blocks=None if not cache.is_global else 6)
    with MultiStreamEngine(pipe, H, W, keep_latents=True) as engine:
        ids = []
        for req in reqs:  # admitted one block apart: the streams sit at frames 6, 3 and 0
            ids.append(engine.admit(req, ListSink()))
            engine.step()
        engine.step()
        engine.stop(ids[0])  # the batch's first row changes: per-row RoPE positions must not follow it
        engine.step()
        engine.step()
        got = [torch.cat(engine.streams[i].latents, dim=1) for i in ids]
    for req, lat in zip(reqs, got, strict=True):
        want = _alone(pipe, req, lat.shape[1] // N)
        assert torch.isfinite(lat).all()
        assert (lat - want).abs().max().item() <= 1e-5, req.name
    assert [g.shape[1] // N for g in got] == [4, 5, 4]


def test_planner_refuses_a_stream_that_does_not_fit_and_says_why():
    pipe = _pipe(WINDOW)
    probe = MultiStreamEngine(pipe, H, W)
    budget = probe.plan(2).total_bytes  # exactly two streams fit
    engine = MultiStreamEngine(pipe, H, W, budget_bytes=budget)
    reqs = _requests()
    engine.admit(reqs[0], ListSink())
    engine.admit(reqs[1], ListSink())
    with pytest.raises(CacheBudgetError, match=r"stream 's2' refused: 3 streams.*KV cache needs"):
        engine.admit(reqs[2], ListSink())
    assert len(engine.active) == 2
    engine.stop(0)  # a stream leaves: the third now fits
    engine.admit(reqs[2], ListSink())
    engine.close()


def test_global_stream_without_length_is_refused():
    engine = MultiStreamEngine(_pipe(KVCacheConfig(page_frames=3)), H, W)
    with pytest.raises(ConfigError, match="num_blocks"):
        engine.admit(_requests()[0], ListSink())


def _decoder_engine(policy, max_queue_blocks=1):
    vae = WanVAE.from_file(FIXTURES / "wan_vae_tiny.safetensors").eval()
    assert vae.config.z_dim == CFG.out_dim
    return MultiStreamEngine(
        _pipe(WINDOW), H, W, decoder_factory=vae.stream_decoder, policy=policy, max_queue_blocks=max_queue_blocks
    )


@pytest.mark.parametrize("policy", ["drop", "stop"])
def test_a_stalled_consumer_does_not_stall_the_others(policy):
    gate = threading.Event()
    engine = _decoder_engine(policy)
    reqs = _requests(num_blocks=3)[:2]
    sinks = [ListSink(), ListSink(gate=gate)]
    ids = [engine.admit(r, s) for r, s in zip(reqs, sinks, strict=True)]
    try:
        engine.run()  # returns although sink 1 never finishes a write while it runs
    finally:
        gate_after = engine.streams[ids[1]].outlet.written
        gate.set()
    stalled = engine.streams[ids[1]]
    assert gate_after == 0
    if policy == "drop":
        assert stalled.blocks_done == 3 and stalled.outlet.dropped >= 1  # queue of 1: block 2 has no room
        assert stalled.stopped == "done"
    else:
        assert stalled.stopped == "consumer too slow"
        assert stalled.state.cache.released and not stalled.state.cache.table.pages  # its pages are freed
    engine.close()
    assert [b for b, _ in sinks[0].blocks] == [0, 1, 2] and sinks[0].closed
    assert sinks[0].blocks[0][1][1:] == (8 * H, 8 * W, 3)
    assert sinks[1].closed


def test_a_failing_sink_stops_only_its_stream():
    engine = _decoder_engine("drop", max_queue_blocks=4)
    reqs = _requests(num_blocks=2)
    ok, bad = ListSink(), ListSink(fail=True)
    a, b = engine.admit(reqs[0], ok), engine.admit(reqs[1], bad)
    engine.run()
    engine.close()
    assert engine.streams[a].stopped == "done" and len(ok.blocks) == 2
    assert "disk full" in engine.streams[b].stopped
