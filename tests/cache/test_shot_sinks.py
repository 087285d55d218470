"""ShotSinkKVCache bookkeeping against LongLive 2.0's roll written out by hand (cache/shots.py docstring).

The numeric parity with their pipeline is tests/pipeline/test_longlive2_parity.py (longlive2_tiny_shots*);
here the resident frames after each block are checked against the buffer their rule gives, step by step.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig, KVCacheSpec, ShotSinkKVCache, create_kv_cache
from inferix_core.errors import BackendUnavailableError, ConfigError


def _cache(window: int, sink: int, block: int) -> ShotSinkKVCache:
    spec = KVCacheSpec(num_layers=1, num_heads=1, head_dim=2, frame_tokens=3, block_frames=block)
    cache = create_kv_cache(KVCacheConfig(window_frames=window, sink_frames=sink), spec, shot_sinks=True)
    assert isinstance(cache, ShotSinkKVCache)
    return cache


def _run(cache: ShotSinkKVCache, num_blocks: int, block: int, shots: set[int]) -> list[list[int]]:
    """Each block: a denoising call and a context pass at the same frames, then a pin at a shot start."""
    seen = []
    for b in range(num_blocks):
        for _ in range(2):
            cache.begin(b * block, block)
            k = torch.randn(1, block * 3, 1, 2)
            keys, _ = cache.layer(0).update(k, k)
            assert keys.shape[1] == len(cache.resident_frames()) * 3
        if b in shots:
            cache.pin_shot(b * block, block)
        seen.append(cache.resident_frames())
    return seen


def test_pin_slides_to_the_sink_and_a_new_shot_replaces_it():
    seen = _run(_cache(window=6, sink=2, block=2), 8, 2, shots={3, 6})
    assert seen[3] == [0, 1, 4, 5, 6, 7]  # pinned at the end, floating
    assert seen[4] == [0, 1, 6, 7, 8, 9]  # rolled to right after the sink: protected from now on
    assert seen[5] == [0, 1, 6, 7, 10, 11]  # without the pin: [0, 1, 8, 9, 10, 11]
    assert seen[6] == [0, 1, 6, 7, 12, 13]  # the new shot's pin floats; the old one is no longer protected
    assert seen[7] == [0, 1, 12, 13, 14, 15]


def test_a_pin_shorter_than_the_block_keeps_the_shot_first_frames():
    seen = _run(_cache(window=5, sink=1, block=2), 6, 2, shots={3})
    assert seen[2] == [0, 2, 3, 4, 5]
    assert seen[3] == [0, 4, 5, 6, 7]
    assert seen[4] == [0, 6, 7, 8, 9]
    assert seen[5] == [0, 6, 9, 10, 11]  # frame 6 (the pin) stays, frame 7 of the same block rolls away


def test_the_written_keys_are_read_back_for_every_resident_frame():
    cache = _cache(window=6, sink=2, block=2)
    written = {}
    for b in range(7):
        cache.begin(2 * b, 2)
        k = torch.randn(1, 6, 1, 2)
        for i in range(2):
            written[2 * b + i] = k[:, 3 * i : 3 * i + 3]
        cache.layer(0).update(k, k)
        if b == 3:
            cache.pin_shot(6, 2)
    k, _ = cache.logical_kv(0)
    want = torch.cat([written[f] for f in cache.resident_frames()], dim=1)
    assert torch.equal(k, want)


def test_shot_sinks_refuse_paged_storage_and_a_pin_not_at_the_end():
    spec = KVCacheSpec(num_layers=1, num_heads=1, head_dim=2, frame_tokens=3, block_frames=2)
    with pytest.raises(BackendUnavailableError, match="ring"):
        create_kv_cache(KVCacheConfig(window_frames=6, sink_frames=2, page_frames=2), spec, shot_sinks=True)
    global_cache = create_kv_cache(KVCacheConfig(), spec, shot_sinks=True)
    assert not isinstance(global_cache, ShotSinkKVCache)  # nothing is ever evicted, so nothing to pin
    cache = _cache(window=6, sink=2, block=2)
    _run(cache, 2, 2, shots=set())
    with pytest.raises(ConfigError, match="context pass"):
        cache.pin_shot(0, 2)
