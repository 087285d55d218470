"""KV caches on a GPU: no host syncs in the block loop, offload bitwise equal to resident, transfer hiding.

Run on an H200 with:  python -m pytest tests/cache/test_cache_cuda.py -q -s
(skipped without CUDA by tests/conftest.py). The loop runs under torch.cuda.set_sync_debug_mode("error"),
so any device→host sync (`.item()`, a blocking copy, a stream synchronize) raises with its stack.
Most tests draw noise on the GPU and build the RoPE tables before the loop, to isolate the cache;
`test_engine_loop_is_sync_free_as_users_run_it` runs the pipeline exactly as users do (CPU-seeded noise,
host prompt, tables built on first use), which is sync-free since host tensors reach the GPU through
pinned non-blocking copies (`to_device_async`).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

log = logging.getLogger(__name__)
pytestmark = pytest.mark.cuda

LAT_H, LAT_W, BLOCK, NUM_BLOCKS = 16, 32, 3, 8
BASE = KVCacheConfig(window_frames=9, sink_frames=1)
KINDS = {
    "ring": {},
    "paged": {"page_frames": 3},
    "offload": {"page_frames": 3, "offload": "always"},
    "int8": {"quantization": "int8"},
    "int4": {"quantization": "int4"},
}


class DeviceNoise:
    """Noise drawn on the GPU from a seeded CUDA generator (a CPU draw would need a blocking copy)."""

    def __init__(self, seed: int):
        self.g = torch.Generator(device="cuda").manual_seed(seed)

    def initial(self, start_frame, shape):
        return torch.randn(shape, generator=self.g, device="cuda")

    def step(self, block, step, shape):
        return torch.randn(shape, generator=self.g, device="cuda")


def wan_like(num_layers: int = 6, dim: int = 512, ffn_dim: int | None = None) -> CausalWanTransformer:
    torch.manual_seed(0)
    cfg = WanConfig(
        dim=dim,
        ffn_dim=ffn_dim or 2 * dim,
        freq_dim=64,
        text_dim=64,
        text_len=16,
        num_heads=dim // 128,
        num_layers=num_layers,
    )
    return CausalWanTransformer(cfg).to("cuda", torch.bfloat16).eval()


def prewarm_rope(model: CausalWanTransformer, num_blocks: int) -> None:
    device = next(model.parameters()).device
    for b in range(num_blocks):
        model.rope.freqs(torch.arange(b * BLOCK, (b + 1) * BLOCK), LAT_H // 2, LAT_W // 2, device)


def run(model, cache_config: KVCacheConfig, num_blocks: int = NUM_BLOCKS, strict: bool = True):
    pipe = BlockDiffusionPipeline(model, SamplingConfig(block_frames=BLOCK), cache_config)
    context = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(1)).to("cuda", torch.bfloat16)
    req = GenerationRequest(
        num_blocks=num_blocks, latent_height=LAT_H, latent_width=LAT_W, context=context, noise=DeviceNoise(2)
    )
    prewarm_rope(model, num_blocks)
    torch.cuda.synchronize()
    if strict:
        torch.cuda.set_sync_debug_mode("error")
    try:
        t0 = time.perf_counter()
        out = pipe.generate(req)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return out, pipe.kv_cache, time.perf_counter() - t0


@pytest.mark.parametrize("kind", list(KINDS))
def test_block_loop_has_no_host_sync(kind):
    out, cache, _ = run(wan_like(), dataclasses.replace(BASE, **KINDS[kind]))
    assert torch.isfinite(out).all()
    assert cache.num_calls == NUM_BLOCKS * 5


def test_offload_bitwise_equal_to_resident_and_ring_close():
    model = wan_like()
    resident, _, _ = run(model, dataclasses.replace(BASE, page_frames=3))
    offload, cache, _ = run(model, dataclasses.replace(BASE, page_frames=3, offload="always"))
    ring, _, _ = run(model, BASE)
    assert torch.equal(offload, resident)
    st = cache.stats()
    assert st["prefetch_hit_rate"] == 1.0 and st["offloaded_bytes"] > 0 and st["pending_transfers"] == 0
    # ring reads keys in slot order, paged in chronological order: same set, summed in another order (bf16)
    assert ((ring.float() - resident.float()).norm() / resident.float().norm()) < 2e-2


def timed_blocks(model, cache_config: KVCacheConfig, lat: tuple[int, int], num_blocks: int):
    """Blocks only: the cache (pinned host pages included) is built before the clock starts."""
    pipe = BlockDiffusionPipeline(model, SamplingConfig(block_frames=BLOCK), cache_config)
    context = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(1)).to("cuda", torch.bfloat16)
    device = next(model.parameters()).device
    for b in range(num_blocks):
        model.rope.freqs(torch.arange(b * BLOCK, (b + 1) * BLOCK), lat[0] // 2, lat[1] // 2, device)
    state = pipe.start_stream(context, *lat, noise=DeviceNoise(2))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = [pipe.denoise_block(state).latents for _ in range(num_blocks)]
    torch.cuda.synchronize()
    return torch.cat(out, dim=1), state.cache, time.perf_counter() - t0


def test_offload_transfer_hiding(record_property):
    """Target: ≥ 90 % of the transfer time hidden (1 − (t_offload − t_resident) / copy time) when the offloaded
    layers' copies fit well inside a call's compute, as the planner sizes them (estimate_offload: copies ≤ 75 % of
    compute). Frames have the 1.3B model's 480×832 size and width (1560 tokens, dim 1536, ffn 8960), so bytes per
    FLOP are the real ones; 8 layers, window 12 + sink 3 (9 past frames = 86 MB per layer-call ≈ 1.7 ms at 50 GB/s
    vs ≈ 2 ms of compute). Half the layers offloaded: copies ≈ 40 % of compute → asserted ≥ 90 %. Every layer
    offloaded: copies ≈ 80 % of compute, nothing left for jitter → logged, asserted ≥ 50 %."""
    from inferix_core.cache import KVCacheSpec
    from inferix_core.cache.offload_layout import budget_for_offloaded
    from inferix_core.cache.planner import estimate_offload

    lat, blocks, layers = (60, 104), 8, 8
    model = wan_like(num_layers=layers, dim=1536, ffn_dim=8960)
    cfg = dataclasses.replace(BASE, window_frames=12, sink_frames=3, page_frames=3)
    spec = KVCacheSpec(layers, 12, 128, model.config.frame_tokens(*lat), BLOCK, dtype=torch.bfloat16, device="cuda")
    half = dataclasses.replace(cfg, offload="auto", gpu_budget_bytes=budget_for_offloaded(cfg, spec, layers // 2))
    full = dataclasses.replace(cfg, offload="always")
    est = estimate_offload(model.config, spec, full)
    assert est.max_hidden_offloaded >= layers // 2  # the planner would allow the half layout
    timed_blocks(model, cfg, lat, 2)  # warm-up: kernels, allocator, pinned pool
    timed_blocks(model, full, lat, 2)
    results = {}
    t_res = sorted(timed_blocks(model, cfg, lat, blocks)[2] for _ in range(3))[1]
    resident = timed_blocks(model, cfg, lat, blocks)[0]
    for name, c in (("half", half), ("all", full)):
        runs = [timed_blocks(model, c, lat, blocks) for _ in range(3)]
        out, cache, _ = runs[0]
        assert torch.equal(out, resident)
        t_off = sorted(r[2] for r in runs)[1]
        st = cache.stats()
        transfer = st["transfer_seconds"]
        hidden = 1.0 - max(0.0, t_off - t_res) / transfer
        results[name] = hidden
        log.warning(
            "offload %s (%d of %d layers): resident %.3f s, offloaded %.3f s, transfers %.3f s (h2d %.2f GB at "
            "%.1f GB/s, d2h %.2f GB), hidden %.1f%% (by stalls %.1f%%), prefetch ready %.2f; planner: at best "
            "%.0f%%",
            name,
            len(st["offloaded_layers"]),
            layers,
            t_res,
            t_off,
            transfer,
            st["h2d_bytes"] / 1e9,
            st["h2d_GBps"] or 0,
            st["d2h_bytes"] / 1e9,
            100 * hidden,
            st["hidden_h2d_pct"] or 0,
            st["prefetch_ready_rate"],
            100 * estimate_offload(model.config, spec, c).best_hidden_fraction,
        )
        record_property(f"hidden_transfer_pct_{name}", 100 * hidden)
        assert st["h2d_bytes"] > 0 and transfer > 0 and st["prefetch_hit_rate"] == 1.0
        assert st["d2h_bytes"] == (blocks - 1) * len(st["offloaded_layers"]) * est.writeback_bytes_per_layer_block
    assert results["half"] >= 0.9
    assert results["all"] >= 0.5


@pytest.mark.parametrize("kind", ["ring", "offload"])
def test_engine_loop_is_sync_free_as_users_run_it(kind):
    """The pipeline as users call it (CPU-seeded noise, RoPE tables built on first use) has no host sync:
    host tensors reach the GPU through pinned, non-blocking copies (`to_device_async`)."""
    model = wan_like()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(block_frames=BLOCK), dataclasses.replace(BASE, **KINDS[kind]))
    context = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)  # on the host
    req = GenerationRequest(num_blocks=4, latent_height=LAT_H, latent_width=LAT_W, context=context, seed=3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = pipe.generate(req)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.isfinite(out).all() and out.shape[1] == 4 * BLOCK
