"""stream() hands a block out before its context pass and runs the pass when the next block is asked for.

The frames reach the consumer (the decoder) one transformer call sooner; the video, and the cache any later
call sees, are those of the immediate pass that `denoise_block` runs (the reference's order). Checked on a
tiny random Wan model against `denoise_block` driven block by block, with a window cache that evicts and a
prompt switch with LongLive's re-cache (both read the cache the pending pass must have written first).
"""

from __future__ import annotations

import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import (
    BlockDiffusionPipeline,
    GenerationRequest,
    PipelineHooks,
    SamplingConfig,
    SeededNoise,
)
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2)
NUM_BLOCKS = 4


class Events(PipelineHooks):
    def __init__(self, log: list):
        self.log = log

    def on_context_pass(self, index: int) -> None:
        self.log.append(("context_pass", index))


def _pipe(cache: KVCacheConfig) -> BlockDiffusionPipeline:
    model = CausalWanTransformer(CFG)
    model.load_state_dict(random_wan_state_dict(CFG, seed=3))
    return BlockDiffusionPipeline(model.eval(), SamplingConfig(block_frames=2), cache)


def _context(seed: int) -> torch.Tensor:
    return torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(seed))


def _request(**kw) -> GenerationRequest:
    return GenerationRequest(NUM_BLOCKS, 4, 4, _context(0), seed=5, **kw)


def _cache_kv(pipe: BlockDiffusionPipeline) -> list[torch.Tensor]:
    return [t.clone() for layer in range(CFG.num_layers) for t in pipe.kv_cache.logical_kv(layer)]


def _immediate(cache: KVCacheConfig) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """The reference order: each block's context pass right after its last step (denoise_block)."""
    pipe = _pipe(cache)
    req = _request()
    noise = SeededNoise(req.seed, total_shape=(1, NUM_BLOCKS * 2, CFG.out_dim, 4, 4))  # as stream() draws it
    state = pipe.start_stream(req.context, 4, 4, max_frames=NUM_BLOCKS * 2, noise=noise)
    pipe.stream_state = state
    latents, caches = [], []
    for _ in range(NUM_BLOCKS):
        latents.append(pipe.denoise_block(state).latents)
        caches.append(_cache_kv(pipe))
    return latents, caches


def _run_passes_at_once(pipe: BlockDiffusionPipeline) -> None:
    """The immediate order inside stream(): every block's pass runs before the block is handed out."""
    real = pipe.denoise_block

    def at_once(*args, **kwargs):
        return real(*args, **{**kwargs, "defer_context_pass": False})

    pipe.denoise_block = at_once


def test_the_block_reaches_the_consumer_before_its_context_pass():
    log: list = []
    pipe = _pipe(KVCacheConfig())
    for out in pipe.stream(_request(), Events(log)):
        log.append(("block", out.index))
    expected = [e for i in range(NUM_BLOCKS) for e in (("block", i), ("context_pass", i))]
    assert log == expected


def test_the_last_pass_is_skipped_only_when_asked():
    for final, passes in ((True, NUM_BLOCKS), (False, NUM_BLOCKS - 1)):
        log: list = []
        pipe = _pipe(KVCacheConfig())
        list(pipe.stream(_request(final_context_pass=final), Events(log)))
        assert sum(1 for e in log if e[0] == "context_pass") == passes
        assert (pipe.stream_state.pending_context is None) == final


def test_video_and_cache_equal_the_immediate_pass_with_a_window_that_evicts():
    cache = KVCacheConfig(window_frames=4, sink_frames=2)  # 4 blocks of 2 frames: frames leave the window
    ref_latents, ref_caches = _immediate(cache)
    pipe = _pipe(cache)
    for i, out in enumerate(pipe.stream(_request())):
        torch.testing.assert_close(out.latents, ref_latents[i], rtol=0, atol=0)
        pipe.settle()  # what a caller reading the cache between blocks does
        for got, want in zip(_cache_kv(pipe), ref_caches[i], strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.isfinite(torch.cat(ref_latents)).all()


def test_skipping_the_last_pass_keeps_the_video_and_settle_writes_it_later():
    ref_latents, ref_caches = _immediate(KVCacheConfig())
    pipe = _pipe(KVCacheConfig())
    latents = [out.latents for out in pipe.stream(_request(final_context_pass=False))]
    torch.testing.assert_close(torch.cat(latents, 1), torch.cat(ref_latents, 1), rtol=0, atol=0)
    pipe.settle()
    for got, want in zip(_cache_kv(pipe), ref_caches[-1], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_prompt_switch_with_recache_sees_the_pending_block_written():
    """The re-cache re-runs the resident frames under the new prompt: it must start from the written cache."""
    switch = [(2, _context(9))]
    runs = []
    for defer in (True, False):
        pipe = _pipe(KVCacheConfig(window_frames=6, sink_frames=2))
        if not defer:
            _run_passes_at_once(pipe)
        req = _request(prompt_schedule=switch, recache_on_switch=True)
        runs.append(torch.cat([out.latents for out in pipe.stream(req)], 1))
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_a_prompt_set_between_blocks_does_not_reach_the_pending_pass():
    """A consumer's `set_prompt` after block 1 applies from block 2 on; block 1's K/V stay under its prompt."""
    runs = []
    for defer in (True, False):
        pipe = _pipe(KVCacheConfig())
        if not defer:
            _run_passes_at_once(pipe)
        latents = []
        for out in pipe.stream(_request()):
            latents.append(out.latents)
            if out.index == 1:
                pipe.set_prompt(pipe.stream_state, _context(11))
        runs.append(torch.cat(latents, 1))
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_a_state_left_with_a_pending_pass_is_freed_without_the_garbage_collector():
    """The next run's start_stream drops the old state: its KV cache must go at once, not at the next gc."""
    import gc
    import weakref

    pipe = _pipe(KVCacheConfig())
    list(pipe.stream(_request(final_context_pass=False)))
    assert pipe.stream_state.pending_context is not None
    old_state, old_cache = weakref.ref(pipe.stream_state), weakref.ref(pipe.kv_cache)
    gc.disable()
    try:
        pipe.start_stream(_context(0), 4, 4, max_frames=NUM_BLOCKS * 2)
        assert old_state() is None and old_cache() is None
    finally:
        gc.enable()
