"""Cache bookkeeping in plain Python, no GPU (as vLLM's tests/v1/core): pool, table, paged slot logic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.cache import BlockPool, BlockTable, KVCacheConfig, KVCacheSpec, PagedKVCache
from inferix_core.cache.paged import max_live_pages, planned_pages
from inferix_core.cache.table import contiguous_runs, token_slots
from inferix_core.errors import CacheBudgetError, ConfigError


def test_pool_allocate_free_fifo_and_refcounts():
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) is None  # caller decides; nothing taken
    assert pool.num_free_pages == 1
    pool.incref([1])
    pool.free([0, 1])
    assert pool.num_free_pages == 2  # page 1 still shared
    assert pool.allocate(2) == [3, 0]  # FIFO: the oldest free page first
    pool.free([1])
    assert pool.allocate(1) == [1]
    with pytest.raises(RuntimeError):
        pool.free([2, 2])
    assert pool.peak_used == 4 and 0 <= pool.usage() <= 1


def test_pool_grow_and_reset():
    pool = BlockPool(2)
    pool.allocate(2)
    assert pool.grow(2) == [2, 3]
    assert pool.allocate(2) == [2, 3]
    pool.reset()
    assert pool.num_free_pages == 4 and pool.num_allocations == 0
    with pytest.raises(CacheBudgetError):
        BlockPool(0)


def test_table_slot_arithmetic():
    t = BlockTable(page_frames=3, frame_tokens=24)
    t.add(0, 4)
    t.add(2, 1)
    assert t.frame_slot(7) == 4  # lp 2 → page 1, offset 1 → 1·3 + 1
    assert t.frame_slot(1) == 13
    assert t.token_slots([7])[0] == 96 and t.token_slots([7])[-1] == 119
    with pytest.raises(RuntimeError):
        t.add(0, 5)
    assert t.remove(0) == 4 and 0 not in t


def test_token_slots_and_runs():
    slots = token_slots(np.array([2, 0]), 2)
    assert slots.tolist() == [4, 5, 0, 1]
    assert contiguous_runs(np.array([5, 6, 7, 20, 21])) == [(5, 0, 3), (20, 3, 2)]
    assert contiguous_runs(np.array([], dtype=np.int64)) == []


@pytest.mark.parametrize("sink,ring,P", [(1, 5, 3), (0, 6, 3), (2, 7, 2), (3, 18, 3), (1, 6, 1)])
def test_max_live_pages_bounds_every_window_position(sink, ring, P):
    bound = max_live_pages(sink, ring, P)
    for end in range(sink + ring, sink + ring + 3 * P + 1):
        live = set(range(sink)) | set(range(end - ring, end))
        assert len({f // P for f in live}) <= bound


def _spec(**kw) -> KVCacheSpec:
    d = dict(num_layers=1, num_heads=1, head_dim=2, frame_tokens=2, block_frames=3)
    d.update(kw)
    return KVCacheSpec(**d)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_paged_cache_pages_follow_the_window(P):
    """Window 7, sink 1: after every block the live frames are sink + 6 newest, pages hold exactly them."""
    cfg = KVCacheConfig(window_frames=7, sink_frames=1, page_frames=P)
    cache = PagedKVCache(cfg, _spec())
    k = torch.zeros(1, 6, 1, 2)
    for b in range(12):
        for _ in range(3):  # repeated calls of one block rewrite the same slots
            cache.begin(3 * b, 3)
            frames = cache.plan.live_frames
            k_all, _ = cache.layer(0).update(k + b, k)
        end = 3 * b + 3
        assert list(frames) == sorted(set(range(min(1, end))) | set(range(max(1, end - 6), end)))
        assert k_all.shape[1] == len(frames) * 2
        assert set(cache.table.pages) == {f // P for f in frames}
        assert cache.pool.num_used_pages == len(cache.table)
        slots = cache.plan.live_frame_slots
        assert len(set(slots.tolist())) == len(slots) and (slots >= 0).all()  # no two live frames share a slot
    assert cache.pool.num_pages <= max(planned_pages(cfg, _spec()), max_live_pages(1, 6, P))


def test_paged_cache_rejects_gaps_and_evicted_rewrites():
    cache = PagedKVCache(KVCacheConfig(window_frames=4, sink_frames=1, page_frames=1), _spec())
    with pytest.raises(ConfigError):
        cache.begin(3, 3)
    for b in range(3):
        cache.begin(3 * b, 3)
        cache.layer(0).update(torch.zeros(1, 6, 1, 2), torch.zeros(1, 6, 1, 2))
    with pytest.raises(ConfigError):
        cache.begin(3, 3)  # frames 3.. were evicted
    cache.reset()
    cache.begin(0, 3)
    assert cache.end_frame == 3 and cache.num_calls == 1


def test_global_paged_cache_grows():
    cache = PagedKVCache(KVCacheConfig(page_frames=3), _spec(max_frames=6))
    x = torch.arange(12.0).view(1, 6, 1, 2)
    for b in range(4):
        cache.begin(3 * b, 3)
        k_all, _ = cache.layer(0).update(x + 100 * b, x)
    assert k_all.shape[1] == 24 and cache.pool.num_pages >= 4
    k, _ = cache.logical_kv(0)
    assert torch.equal(k[:, :6], x) and torch.equal(k[:, 18:], x + 300)


def test_page_aligned_plan_has_no_slack():
    spec = _spec(frame_tokens=1560, block_frames=3)
    assert planned_pages(KVCacheConfig(window_frames=21, sink_frames=3), spec) == 7
    assert planned_pages(KVCacheConfig(window_frames=21, sink_frames=3, quantization="int8"), spec) == 5
