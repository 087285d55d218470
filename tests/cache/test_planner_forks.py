"""The planner admits N futures at once (issue #22): the shared past once + N × the new blocks, against counts.

`plan_forks` / `branching.plan_futures` count the pages the common past maps once, each future's own pages
(the page the fork point falls inside is copied, then new ones) and one batched block call of N streams.
Checked against what the arena allocates (`profiling.LiveBytes`, and the pool's peak of used pages) on a tiny
CPU model: exact for a global cache, an upper bound in a window; a fork count that does not fit is refused
before anything is forked or allocated, naming the largest N that fits; `MultiStreamEngine.admit_many` admits
N streams together or none.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.cache.planner import plan_forks
from inferix_core.clients.branching import Branches, Future, branch_video, new_arena, plan_futures, start_stream
from inferix_core.clients.multi_stream import MultiStreamEngine, StreamRequest
from inferix_core.errors import CacheBudgetError
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig
from inferix_core.profiling.live_bytes import LiveBytes
from tests.cache.test_planner_counts import CONFIG, LATENT_H, LATENT_W
from tests.test_api import tiny_world
from tests.test_multi_stream import ListSink

BLOCK = 3
CASES = {
    # 6-frame pages, 3-frame blocks, a fork after an odd number of blocks: inside a page (one copy per future)
    "global_page6": (KVCacheConfig(page_frames=6), 3, 2),
    "window_sink_page3": (KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3), 4, 3),
}


def _pipe(cache):
    torch.manual_seed(0)
    model = CausalWanTransformer(CONFIG).eval().requires_grad_(False)
    return BlockDiffusionPipeline(model, SamplingConfig(denoising_steps=(1000, 500), block_frames=BLOCK), cache)


def _parent(pipe, past_blocks):
    arena = new_arena(pipe, LATENT_H, LATENT_W, num_pages=1)  # grows with the past only
    context = torch.randn(1, CONFIG.text_len, CONFIG.text_dim, generator=torch.Generator().manual_seed(1))
    state = start_stream(pipe, context, LATENT_H, LATENT_W, seed=0, arena=arena)
    for _ in range(past_blocks):
        pipe.denoise_block(state)
    return state


@pytest.mark.parametrize("case", list(CASES))
def test_n_futures_planned_equal_the_pages_they_allocate(case):
    cache, past_blocks, future_blocks = CASES[case]
    pipe = _pipe(cache)
    parent = _parent(pipe, past_blocks)
    arena = parent.cache.arena
    before = arena.num_pages
    plan = plan_futures(pipe, parent, 3, future_blocks, budget_bytes=10 * 2**30)
    assert plan.shared_pages == len(parent.cache.table) == arena.pool.num_used_pages
    assert plan.page_bytes == arena.page_bytes()
    assert before < plan.num_pages
    with LiveBytes() as live:  # admitted: the arena's buffers are built once, for the planned pages
        branches = Branches(pipe, parent, [Future(seed=s) for s in (1, 2, 3)], budget_bytes=10 * 2**30,
                            future_blocks=future_blocks)  # fmt: skip
    assert plan.kv_bytes <= live.current <= 1.01 * plan.kv_bytes, (live.current, plan.kv_bytes)
    arena.pool.peak_used = arena.pool.num_used_pages
    latents = branches.run(future_blocks)
    assert all(torch.isfinite(x).all() for x in latents)
    assert arena.num_pages == plan.num_pages  # never grew while the futures ran
    if cache.is_global:  # exact: the past once + each future's copied page and new pages
        assert arena.pool.peak_used == plan.num_pages == plan.shared_pages + 3 * 2
        assert arena.num_page_copies == 3
    else:
        assert arena.pool.peak_used <= plan.num_pages


def test_batched_futures_activation_term_bounds_a_counted_step():
    cache, past_blocks, _ = CASES["global_page6"]
    pipe = _pipe(cache)
    parent = _parent(pipe, past_blocks)
    branches = Branches(pipe, parent, [Future(seed=s) for s in (1, 2, 3)], budget_bytes=10 * 2**30, future_blocks=1)
    with LiveBytes() as live:
        branches.step()
    # the step's own latents (float32): noise, x, x0, flow and the outputs, about 6 block tensors per future
    latents = 6 * 3 * BLOCK * CONFIG.in_dim * LATENT_H * LATENT_W * 4
    counted = live.peak.bytes - latents
    planned = branches.plan.activation_bytes
    # an estimate that errs high (docs/memory.md): never under by more than 10 %; 0.45 x counted here for 3 streams
    assert 0.35 * planned <= counted <= 1.1 * planned, (counted, planned, counted / planned)


def test_too_many_futures_are_refused_before_anything_is_forked_naming_how_many_fit():
    cache, past_blocks, future_blocks = CASES["global_page6"]
    pipe = _pipe(cache)
    parent = _parent(pipe, past_blocks)
    arena = parent.cache.arena
    budget = plan_futures(pipe, parent, 2, future_blocks).total_bytes  # exactly two fit
    pages, streams, refs = arena.num_pages, arena.num_streams, [p.ref_cnt for p in arena.pool.pages]
    with pytest.raises(CacheBudgetError, match=r"3 futures need .*; at most 2 futures fit: ask for 2 or fewer"):
        Branches(pipe, parent, [Future(seed=s) for s in (1, 2, 3)], budget_bytes=budget, future_blocks=future_blocks)
    assert (arena.num_pages, arena.num_streams, [p.ref_cnt for p in arena.pool.pages]) == (pages, streams, refs)
    two = Branches(pipe, parent, [Future(seed=1), Future(seed=2)], budget_bytes=budget, future_blocks=future_blocks)
    assert two.plan.fits and two.plan.max_futures == 2
    with pytest.raises(CacheBudgetError, match="not even one future fits"):
        plan_futures(pipe, parent, 1, future_blocks, budget_bytes=1).check()


def test_branch_video_refuses_before_generating():
    wm = tiny_world()
    n = wm.sampling.block_frames
    two = plan_forks(wm.config, 4, 6, wm.default_cache, num_futures=2, past_frames=2 * n, future_frames=2 * n,
                     dtype=wm.dtype, block_frames=n)  # fmt: skip
    with pytest.raises(CacheBudgetError, match=r"3 futures need .* at most 2 futures fit"):
        branch_video(wm, "", [None] * 3, past_blocks=2, future_blocks=2, width=48, height=32,
                     budget_bytes=two.total_bytes)  # fmt: skip


def test_admit_many_admits_all_or_none_naming_how_many_fit():
    cache = KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3)
    pipe = _pipe(cache)
    probe = MultiStreamEngine(pipe, LATENT_H, LATENT_W)
    engine = MultiStreamEngine(pipe, LATENT_H, LATENT_W, budget_bytes=probe.plan(2).total_bytes)
    g = torch.Generator().manual_seed(2)
    reqs = [StreamRequest(torch.randn(1, CONFIG.text_len, CONFIG.text_dim, generator=g), seed=i) for i in range(3)]
    with pytest.raises(CacheBudgetError, match=r"3 streams refused: .* at most 2 of them fit"):
        engine.admit_many([(r, ListSink()) for r in reqs])
    assert not engine.streams and engine.arena.num_streams == 0  # nothing started
    ids = engine.admit_many([(r, ListSink()) for r in reqs[:2]])
    assert len(ids) == 2 and len(engine.active) == 2
    engine.close()
