"""Memory planner properties (no GPU): exact cache bytes, the budget error text, and the fallback order."""

from __future__ import annotations

import json

import pytest
import torch

from inferix_core.cache import KVCacheConfig, plan_memory
from inferix_core.cache.planner import cache_cost
from inferix_core.cache.spec import KVCacheSpec
from inferix_core.errors import CacheBudgetError, ConfigError
from inferix_core.models.wan.config import WanConfig
from inferix_core.vae.memory import DecodeSlicing

GiB = 1024**3
WAN13 = WanConfig()  # 1.3B: 30 layers, 12 heads × 128
H, W = 60, 104  # latents of 480 × 832


def test_ring_cache_bytes_match_the_issue_example():
    plan = plan_memory(WAN13, H, W, KVCacheConfig(window_frames=21, sink_frames=3), dtype=torch.bfloat16)
    assert plan.requested_cache.device_bytes == 30 * 21 * 1560 * 12 * 128 * 2 * 2
    assert "30 layers × 21 frames × 1560 tokens × 12 heads × 128, K and V, bf16" in plan.requested_cache.formula
    assert plan.feasible and plan.chosen == plan.requested and plan.message == ""
    json.dumps(plan.to_dict())
    assert "Memory plan" in plan.describe()


def test_cache_bytes_equal_allocated_bytes():
    """The planner's numbers are the stores' allocations (checked on a small spec)."""
    from inferix_core.cache import create_kv_cache

    spec = KVCacheSpec(3, 2, 8, 6, 3, max_frames=12)
    for cfg in (
        KVCacheConfig(window_frames=7, sink_frames=1),
        KVCacheConfig(window_frames=7, sink_frames=1, page_frames=2),
        KVCacheConfig(window_frames=9, sink_frames=3, quantization="int8"),
        KVCacheConfig(window_frames=9, sink_frames=3, quantization="int4"),
        KVCacheConfig(page_frames=3),
        KVCacheConfig(window_frames=7, sink_frames=1, offload="always"),
    ):
        cost, stats = cache_cost(cfg, spec), create_kv_cache(cfg, spec).stats()
        assert cost.device_bytes == stats["resident_bytes"], cfg
        assert cost.host_bytes == stats["offloaded_bytes"], cfg


def test_budget_error_names_the_numbers_and_the_fixes():
    plan = plan_memory(WAN13, H, W, KVCacheConfig(window_frames=21, sink_frames=3), budget_bytes=6 * GiB)
    assert not plan.feasible
    with pytest.raises(CacheBudgetError) as e:
        plan.check()
    msg = str(e.value)
    assert msg.startswith("KV cache needs 5.6 GiB (30 layers × 21 frames × 1560 tokens")
    assert "quantization='int8'" in msg and "offload" in msg and "None of these fits" in msg


def test_fallback_prefers_offload_then_quantization_then_window():
    cfg = KVCacheConfig(window_frames=21, sink_frames=3)
    whole = DecodeSlicing()  # the decode held at whole blocks, so the cache has to give
    plan = plan_memory(WAN13, H, W, cfg, budget_bytes=13 * GiB, decode_slicing=whole)
    assert plan.feasible and plan.chosen.offload == "auto" and plan.chosen.quantization == "none"
    assert plan.total_bytes <= 13 * GiB
    assert "Lower window_frames to" in plan.message
    labels = [c[0] for c in plan.candidates]
    assert labels[:3] == ["offload", "int8", "int4"]


def test_window_suggestion_is_the_largest_that_fits():
    cfg = KVCacheConfig(window_frames=21, sink_frames=3)
    whole = DecodeSlicing()
    other = plan_memory(WAN13, H, W, cfg, decode_slicing=whole).fixed_bytes
    per_frame = 30 * 1560 * 12 * 128 * 2 * 2
    plan = plan_memory(WAN13, H, W, cfg, budget_bytes=other + 14 * per_frame + per_frame // 2, decode_slicing=whole)
    assert "Lower window_frames to 14" in plan.message


def test_quantized_cache_is_smaller_and_global_needs_length():
    spec = KVCacheSpec(30, 12, 128, 1560, 3, dtype=torch.bfloat16)
    ring = cache_cost(KVCacheConfig(window_frames=48, sink_frames=3), spec).device_bytes
    int8 = cache_cost(KVCacheConfig(window_frames=48, sink_frames=3, quantization="int8"), spec).device_bytes
    int4 = cache_cost(KVCacheConfig(window_frames=48, sink_frames=3, quantization="int4"), spec).device_bytes
    assert int4 < int8 < 0.65 * ring
    with pytest.raises(ConfigError):
        plan_memory(WAN13, H, W, KVCacheConfig())


def test_vae_estimates_follow_the_decoder_the_model_has():
    """The Wan VAE's working set matches the H200 measurement; the bundled tiny AE is not charged a Wan VAE."""
    from inferix_core.api import plan_run
    from inferix_core.models.registry import load_world_model
    from inferix_core.vae import WanVAE, WanVAEConfig
    from inferix_core.vae.config import VAEDecodeOptions

    with torch.device("meta"):
        wan = WanVAE(WanVAEConfig(dim=96)).to(torch.bfloat16)
    wan.decode_options = VAEDecodeOptions.fast()
    measured = 6.99 * GiB  # H200, VAEDecodeOptions.fast(), one 3-latent block at 480×832 (docs/performance.md)
    assert abs(wan.decode_working_set_bytes(60, 104, 3) - measured) < 0.05 * measured
    bundled = load_world_model("bundled", device="cpu")
    width, height = bundled.default_size
    plan = plan_run(bundled, None, width, height, num_blocks=4)
    weights = sum(p.numel() * p.element_size() for p in bundled.vae.parameters())
    assert weights < plan.vae_bytes < weights + 64 * 1024**2  # was 0.5 GiB with the Wan formula


def test_the_decode_is_sliced_before_blocks_are_streamed():
    """1.3B end to end with the Wan VAE in 8 GiB: the plan fits by decoding one latent frame per call
    (the same frames), then keeps as many blocks as fit; it names the slicing."""
    from inferix_core.cache.planner import allocator_headroom_bytes, plan_resident_blocks
    from inferix_core.vae.memory import CUDA_STREAM_SLICING, DECODE_SLICINGS

    cache, card = KVCacheConfig(window_frames=12, sink_frames=3), 8 * GiB
    budget = card - allocator_headroom_bytes(card)  # what a plan may fill; the rest is the allocator's
    resident, plan = plan_resident_blocks(WAN13, card, H, W, cache, max_frames=9)
    assert plan.total_bytes <= budget and plan.decode.slicing in DECODE_SLICINGS
    assert "1 latent frame per call" in plan.describe()
    # every faster slicing at this block count, and one more block with the smallest, do not fit
    faster = DECODE_SLICINGS[: DECODE_SLICINGS.index(plan.decode.slicing)]
    for slicing in faster:
        p = plan_memory(WAN13, H, W, cache, max_frames=9, resident_blocks=resident, decode_slicing=slicing)
        assert p.total_bytes > budget
    more = plan_memory(
        WAN13, H, W, cache, max_frames=9, resident_blocks=resident + 1, decode_slicing=DECODE_SLICINGS[-1]
    )
    assert more.total_bytes > budget
    unlimited = plan_memory(WAN13, H, W, cache, max_frames=9)  # no budget: the loader's CUDA slicing
    assert unlimited.decode.slicing == CUDA_STREAM_SLICING and unlimited.total_bytes > budget


def test_activations_and_decode_count_once_unless_the_decode_overlaps():
    cache = KVCacheConfig(window_frames=12, sink_frames=3)
    seq = plan_memory(WAN13, H, W, cache, max_frames=9)
    both = plan_memory(WAN13, H, W, cache, max_frames=9, decode_overlaps=True)
    kept = seq.weights_bytes + seq.requested_cache.device_bytes + seq.vae_kept_bytes
    assert seq.total_bytes == kept + max(seq.activation_bytes, seq.decode.transient_bytes)
    assert both.total_bytes == kept + seq.activation_bytes + seq.decode.transient_bytes
    assert seq.vae_bytes == seq.vae_weights_bytes + seq.decode.working_set_bytes
