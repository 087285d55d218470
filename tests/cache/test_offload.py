"""Offloaded cache on CPU, the GPU code path with emulated streams: bitwise = resident under the latest and the
earliest schedule of the side copies, copies counted byte for byte (past per call, write-back once per block),
missing waits caught, and restart() of the paged kinds.

`OffloadStore.cpu_schedule`: "deferred" runs a side copy only when compute waits on it (a GPU running the copy
as late as it may), "eager" when it is issued (program order). A copy ordered wrongly against compute reads or
writes the wrong data in one of them, which shows here as a mismatch with the resident cache.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.cache import KVCacheConfig, KVCacheSpec, OffloadedKVCache, PagedKVCache, RingKVCache, create_kv_cache
from inferix_core.cache import offload as offload_mod
from inferix_core.cache.offload import OffloadStore
from inferix_core.cache.offload_layout import budget_for_offloaded, offload_layout
from inferix_core.cache.planner import cache_cost, estimate_offload
from inferix_core.errors import ConfigError
from inferix_core.models.wan.config import WanConfig

T, H, D = 4, 2, 8  # frame tokens, heads, head dim


def spec(num_layers: int = 4, block: int = 3, batch: int = 1, max_frames: int | None = None) -> KVCacheSpec:
    return KVCacheSpec(num_layers, H, D, T, block, batch_size=batch, max_frames=max_frames)


def calls(num_blocks: int, block: int, steps: int = 3, first_frame_alone: bool = False):
    """(start, n) of every call of a block loop: `steps` calls per block (denoising steps + context pass)."""
    out, start = [], 0
    if first_frame_alone:
        out += [(0, 1)] * steps
        start = 1
    for _ in range(num_blocks):
        out += [(start, block)] * steps
        start += block
    return out


def drive(cache, plan, sp: KVCacheSpec, seed: int = 0, inspect_every: int = 0):
    """Run the calls with fresh random K/V per call and layer; return every span and (sometimes) logical_kv."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for c, (start, n) in enumerate(plan):
        cache.begin(start, n)
        for layer in range(sp.num_layers):
            k = torch.randn(sp.batch_size, n * T, H, D, generator=g)
            v = torch.randn(sp.batch_size, n * T, H, D, generator=g)
            out.extend(t.clone() for t in cache.layer(layer).update(k, v))
        if inspect_every and c % inspect_every == 0:
            out.extend(t.clone() for layer in range(sp.num_layers) for t in cache.logical_kv(layer))
    return out


CONFIGS = {
    "p3_w7": KVCacheConfig(window_frames=7, sink_frames=1, page_frames=3),
    "p2_w7": KVCacheConfig(window_frames=7, sink_frames=1, page_frames=2),  # pages straddle blocks
    "p1_w9_s3": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=1),
    "w4": KVCacheConfig(window_frames=4, sink_frames=1, page_frames=3),  # a block leaves the window at once
    "global": KVCacheConfig(page_frames=3),
}


@pytest.fixture(params=["deferred", "eager"])
def schedule(request, monkeypatch):
    monkeypatch.setattr(OffloadStore, "cpu_schedule", request.param)
    return request.param


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("mixed", [False, True], ids=["all", "mixed"])
def test_offload_bitwise_equals_resident(name, mixed, schedule):
    base = CONFIGS[name]
    sp = spec(num_layers=6, batch=2, max_frames=12)
    cfg = dataclasses.replace(base, offload="always")
    if mixed:
        cfg = dataclasses.replace(base, offload="auto", gpu_budget_bytes=budget_for_offloaded(base, sp, 4))
    off = OffloadedKVCache(cfg, sp)
    assert off.store.m == (4 if mixed else 6)
    plan = calls(6, 3, first_frame_alone=name != "w4")
    ref = drive(PagedKVCache(base, sp), plan, sp, inspect_every=4)
    got = drive(off, plan, sp, inspect_every=4)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    st = off.stats()
    assert st["prefetch_hit_rate"] == 1.0 and st["pending_transfers"] == 0


def test_bytes_past_per_call_and_write_back_once_per_block(schedule):
    """Window 9, sink 3, blocks of 3 (steady state: 6 past frames): h2d = past only, d2h = each block once."""
    sp = spec(num_layers=4)
    cfg = KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3, offload="always")
    cache = create_kv_cache(cfg, sp)
    frame = 2 * T * H * D * 4  # K and V of one frame of one layer, fp32
    blocks, steps = 8, 5
    drive(cache, calls(blocks, 3, steps), sp)
    st = cache.stats()
    past = [min(3 * b, 6) for b in range(blocks)]  # block b sees sinks + up to 3 older frames... capped at 6
    assert st["h2d_bytes"] == sum(steps * 4 * p * frame for p in past)
    assert st["d2h_bytes"] == (blocks - 1) * 4 * 3 * frame  # each finished block once; the last is still on the GPU
    assert st["writebacks"] == (blocks - 1) * 4
    # the last block's K/V are read from the block buffers, the older ones from the host
    k, _ = cache.logical_kv(2)
    assert k.shape[1] == 9 * T


class _Never(set):
    def __contains__(self, item) -> bool:
        return False


def test_a_missing_wait_is_caught_by_the_deferred_schedule(monkeypatch):
    """The emulation is only worth something if it fails without the waits: drop each one and see it differ."""
    monkeypatch.setattr(OffloadStore, "cpu_schedule", "deferred")
    sp = spec(num_layers=3)
    base = KVCacheConfig(window_frames=7, sink_frames=1, page_frames=3)
    plan = calls(5, 3)
    ref = drive(PagedKVCache(base, sp), plan, sp)

    def differs(patch) -> bool:
        cache = OffloadedKVCache(dataclasses.replace(base, offload="always"), sp)
        patch(cache.store)
        return any(not torch.equal(a, b) for a, b in zip(drive(cache, plan, sp), ref))

    assert not differs(lambda store: None)

    def no_prefetch_wait(store):  # compute reads staging without waiting for the h2d copy
        store.compute.wait = lambda event: None

    def no_host_wait(store):  # the prefetch reads host pages before the write-back wrote them
        store._wb_unseen_h2d = _Never()

    def no_write_back_waits(store):  # ... and compute may overwrite a block buffer before its write-back read it
        store._wb_unseen_h2d = store._wb_unseen_compute = _Never()

    for patch in (no_prefetch_wait, no_host_wait, no_write_back_waits):
        assert differs(patch), patch.__name__
    # (compute's own wait on the write-back is implied today by the prefetch it waits for, which waited on
    # the write-back; it stays as the direct statement of that hazard)


def test_staging_rotation_is_two_ahead():
    """Prefetches are issued in order, two offloaded layers ahead of the one computing."""
    sp = spec(num_layers=5)
    cache = create_kv_cache(KVCacheConfig(window_frames=7, sink_frames=1, page_frames=3, offload="always"), sp)
    store = cache.store
    cache.begin(0, 3)
    assert sorted(store._issued) == [0, 1]
    k = torch.zeros(1, 3 * T, H, D)
    cache.layer(0).update(k, k)
    assert sorted(store._issued) == [1, 2]
    for layer in range(1, 5):
        cache.layer(layer).update(k, k)
    assert store._issued == {} and store.prefetch_misses == 0


def test_planner_bytes_equal_allocation_and_estimate():
    sp = spec(num_layers=6, max_frames=12)
    base = KVCacheConfig(window_frames=7, sink_frames=1, page_frames=2)
    for cfg in (
        dataclasses.replace(base, offload="always"),
        dataclasses.replace(base, offload="auto", gpu_budget_bytes=budget_for_offloaded(base, sp, 4)),
    ):
        cost, st = cache_cost(cfg, sp), create_kv_cache(cfg, sp).stats()
        assert (cost.device_bytes, cost.host_bytes) == (st["resident_bytes"], st["offloaded_bytes"]), cfg


def test_offload_layout_from_a_budget_worked_by_hand():
    """The budget is derived here from the shapes, not from the planner's own helpers."""
    sp = spec(num_layers=6, max_frames=12)
    base = KVCacheConfig(window_frames=7, sink_frames=1, page_frames=2)
    frame = 2 * T * H * D * 4  # K and V of one frame of one layer, fp32: 512 bytes
    # sink 1 → 1 page; 6 ring frames that may start mid-page → ⌈5/2⌉ + 1 = 4 pages; 5 pages of 2 frames
    layer, block = 5 * 2 * frame, 3 * frame
    # 4 of 6 layers offloaded: 2 resident + 2 staging layers of pages, and 4 block buffers
    four = (2 + 2) * layer + 4 * block
    assert budget_for_offloaded(base, sp, 4) == four
    for budget, offloaded in ((four, 4), (four - 1, 5), (6 * layer, 0)):
        cfg = dataclasses.replace(base, offload="auto", gpu_budget_bytes=budget)
        assert offload_layout(cfg, sp).num_offloaded == offloaded, budget


@pytest.mark.parametrize("h2d", [50e9, 25e9])
def test_offload_estimate_worked_by_hand(h2d):
    """Wan 1.3B, 480×832, window 21 + sink 3, at a given bandwidth and compute rate (not the module's defaults)."""
    wan = WanConfig()
    big = KVCacheSpec(30, 12, 128, 1560, 3, dtype=torch.bfloat16)
    cfg = KVCacheConfig(window_frames=21, sink_frames=3, offload="always")
    flops_per_s = 450e12
    est = estimate_offload(wan, big, cfg, h2d_bytes_per_s=h2d, flops_per_s=flops_per_s)
    frame = 2 * 1560 * 12 * 128 * 2  # K and V of one frame of one layer, bf16: 9.58 MB
    assert est.past_frames == 18 and est.bytes_per_layer_call == 18 * frame
    assert est.writeback_bytes_per_layer_block == 3 * frame
    # n = 3·1560 queries over 21·1560 keys, d = 1536, ffn = 8960, 512 text tokens
    n, d, ffn, span, text = 3 * 1560, 1536, 8960, 21 * 1560, 512
    flops = 2 * n * (6 * d * d + 2 * d * ffn) + 4 * n * span * d + 4 * n * text * d
    assert 1.34e12 < flops < 1.35e12 and est.flops_per_layer_call == flops
    assert est.h2d_seconds_per_layer_call == pytest.approx(18 * frame / h2d)
    assert est.layer_seconds == pytest.approx(flops / flops_per_s)
    # copies may fill 3/4 of the compute: 0.75 · 30 · 2.99 ms / 3.45 ms = 19.5 layers at 50 GB/s, 9.8 at 25
    assert est.max_hidden_offloaded == {50e9: 19, 25e9: 9}[h2d]
    assert est.min_resident_layers == 30 - est.max_hidden_offloaded
    assert est.best_hidden_fraction == pytest.approx(30 * flops / flops_per_s / (30 * 18 * frame / h2d))


# -- restart(): the paged kinds skip evicted frames like the ring ------------------------------------------
@pytest.mark.parametrize("kind", ["paged", "offload", "quant"])
def test_paged_restart_matches_ring(kind, schedule):
    """Write the sinks, jump to the window's first block, continue: same live frames and K/V as the ring."""
    sp = spec(num_layers=2, block=2)
    base = KVCacheConfig(window_frames=6, sink_frames=2)
    extra = {
        "paged": {"page_frames": 2},
        "offload": {"page_frames": 2, "offload": "always"},
        "quant": {"quantization": "int8", "residual_frames": 2},
    }[kind]
    ring, other = RingKVCache(base, sp), create_kv_cache(dataclasses.replace(base, **extra), sp)
    g = torch.Generator().manual_seed(0)
    sinks = [torch.randn(1, 2 * T, H, D, generator=g) for _ in range(4)]  # random: fresh pages may be zeros
    for cache in (ring, other):
        cache.begin(0, 2)
        cache.layer(0).update(sinks[0], sinks[1])
        cache.layer(1).update(sinks[2], sinks[3])
    with pytest.raises(ConfigError, match="would go back"):
        other.restart(1)
    ring.restart(10)
    other.restart(10)
    assert other.resident_frames() == ring.resident_frames() == [0, 1] and other.end_frame == 10
    for start in (10, 12, 14, 16):
        kv = [torch.randn(1, 2 * T, H, D, generator=g) for _ in range(4)]
        for cache in (ring, other):
            cache.begin(start, 2)
            cache.layer(0).update(kv[0], kv[1])
            cache.layer(1).update(kv[2], kv[3])
        assert other.resident_frames() == ring.resident_frames()
        assert other.attended_tokens == ring.attended_tokens
        if kind != "quant":
            for layer in range(2):
                assert all(torch.equal(a, b) for a, b in zip(other.logical_kv(layer), ring.logical_kv(layer)))
    assert other.resident_frames() == [0, 1, 14, 15, 16, 17]
    assert other.num_evictions == ring.num_evictions
    other.reset()
    with pytest.raises(ConfigError, match="sink frames first"):
        other.restart(4)


def test_module_docstring_names_the_design():
    assert (
        "once per call" in offload_mod.__doc__ and "once, when the first call of another block" in offload_mod.__doc__
    )
