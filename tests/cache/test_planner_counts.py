"""The memory planner's terms against allocations counted on tiny CPU models (`profiling.LiveBytes`).

A tiny causal Wan transformer runs a few blocks through the pipeline with each KV cache kind while every
tensor storage is tracked until freed; the planner is then asked about the same run (its shapes, not
numbers typed here). Terms and their tolerances:

* transformer weights: exact (the parameters' storages).
* KV cache, every kind (ring, paged, int8, int4, offload with its pinned host half): the bytes the stores
  allocate (device + host; on the CPU both are host memory), up to their index tensors: within 1 %.
* activations of one block call: an estimate that errs high (docs/memory.md): the count must lie within
  [0.5, 1.1] × it. It may over-count up to 2× (0.56–0.97 × here, 0.66 × at the real 1.3B shape counted
  on `meta`; the H200 adds ~0.05 GiB of workspaces), and never under-count by more than 10 %.
* the Wan VAE decode: tests/vae/test_decode_slicing.py (within 10 %, state exact).
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig, create_kv_cache
from inferix_core.cache.plan_costs import activation_bytes, cache_cost, kv_spec, transformer_weight_bytes
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from inferix_core.profiling.live_bytes import LiveBytes

CONFIG = WanConfig(dim=64, ffn_dim=192, freq_dim=32, text_dim=32, text_len=16, num_heads=4, num_layers=2)
LATENT_H, LATENT_W, BLOCK, NUM_BLOCKS = 16, 24, 3, 4
KINDS = {
    "ring": KVCacheConfig(window_frames=6),
    "ring+sink": KVCacheConfig(window_frames=9, sink_frames=3),
    "paged": KVCacheConfig(window_frames=6, page_frames=3),
    "int8": KVCacheConfig(window_frames=9, sink_frames=3, quantization="int8"),
    "int4": KVCacheConfig(window_frames=9, sink_frames=3, quantization="int4"),
    "offload": KVCacheConfig(window_frames=6, offload="always"),
}


def _spec(dtype=torch.float32):
    return kv_spec(CONFIG, LATENT_H, LATENT_W, BLOCK, 1, dtype, NUM_BLOCKS * BLOCK)


def test_weight_term_is_the_parameters_allocated():
    with LiveBytes() as live:
        model = CausalWanTransformer(CONFIG)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert transformer_weight_bytes(CONFIG, 4) == params
    assert live.current >= params  # every parameter storage was allocated inside (and buffers too)


@pytest.mark.parametrize("kind", list(KINDS))
def test_cache_term_is_what_the_store_allocates(kind):
    config = KINDS[kind]
    spec = _spec()
    cost = cache_cost(config, dataclass_on_cpu(spec))
    with LiveBytes() as live:
        cache = create_kv_cache(config, dataclass_on_cpu(spec))
    assert cache is not None
    planned = cost.device_bytes + cost.host_bytes
    assert planned <= live.current <= 1.01 * planned, (kind, live.current, cost)  # + page tables / ring indices


def dataclass_on_cpu(spec):
    import dataclasses

    return dataclasses.replace(spec, device="cpu")


@pytest.mark.parametrize("kind", ["ring", "paged", "int8"])
def test_activation_term_bounds_a_counted_block_call(kind):
    """Peak live bytes of a whole run minus the cache and the run's latents ≈ one block call's activations."""
    config = KINDS[kind]
    torch.manual_seed(0)
    model = CausalWanTransformer(CONFIG).eval().requires_grad_(False)
    pipe = BlockDiffusionPipeline(model, SamplingConfig(denoising_steps=(1000, 500), block_frames=BLOCK), config)
    context = torch.randn(1, CONFIG.text_len, CONFIG.text_dim)
    with LiveBytes() as live:
        latents = pipe.generate(GenerationRequest(NUM_BLOCKS, LATENT_H, LATENT_W, context, seed=0))
    assert not latents.isnan().any()
    spec = _spec()
    cache = cache_cost(config, spec)
    # the run's noise and the block's latents (float32): (all frames + 5 copies of a block) × C × h × w
    run_latents = (NUM_BLOCKS * BLOCK + 5 * BLOCK) * CONFIG.in_dim * LATENT_H * LATENT_W * 4
    counted = live.peak.bytes - cache.device_bytes - cache.host_bytes - run_latents
    planned = activation_bytes(CONFIG, spec, config)
    assert 0.5 * planned <= counted <= 1.1 * planned, (kind, counted, planned, counted / planned)
