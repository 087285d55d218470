"""A finished run's KV cache is freed by reference counting alone (no cycle waiting for the GC)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from inferix_core.cache import KVCacheConfig, KVCacheSpec, create_kv_cache


@pytest.mark.parametrize(
    "config",
    [KVCacheConfig(), KVCacheConfig(window_frames=4, sink_frames=1), KVCacheConfig(window_frames=4, page_frames=2)],
    ids=["ring", "window", "paged"],
)
def test_cache_is_freed_without_gc(config):
    spec = KVCacheSpec(num_layers=2, num_heads=2, head_dim=8, frame_tokens=4, block_frames=2, max_frames=6)
    gc.disable()
    try:
        cache = create_kv_cache(config, spec)
        cache.begin(0, 2)
        k = torch.randn(1, 8, 2, 8)
        cache.layer(0).update(k, k)
        ref = weakref.ref(cache)
        del cache
        assert ref() is None
    finally:
        gc.enable()
