"""Long synthetic rollouts on CPU: every cache kind gives the reference's shift-copy outputs at every block,
with flat memory, for 1,000 blocks of a tiny model (1 layer, dim 32, 2 heads, 4×4 latents).

`ShiftCopyCache` below is an independent re-statement of tests/fixtures/README.md §1.4 (the reference's
KV cache: a buffer of S tokens, global_end/local_end, eviction by a left-shifting copy that keeps the
sink tokens), written from the README only. It shares no code with inferix_core.cache.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import inferix_core.pipeline.block_diffusion as block_diffusion
from inferix_core.cache import KVCacheConfig, KVCacheSpec
from inferix_core.cache.offload_layout import budget_for_offloaded
from inferix_core.cache.paged import planned_pages
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

NUM_BLOCKS = 1000
WINDOW, SINK, BLOCK = 7, 1, 3  # window not a multiple of the block: the ring wraps mid-block
ATOL = 1e-5


class _ShiftCopyLayer:
    def __init__(self, cache: ShiftCopyCache):
        self.c = cache
        self.k = self.v = None
        self.global_end = self.local_end = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.c
        if self.k is None:
            shape = (k.shape[0], c.size_tokens, *k.shape[2:])
            self.k, self.v = k.new_zeros(shape), v.new_zeros(shape)
        n = k.shape[1]
        current_end = c.current_start + n
        size = c.size_tokens
        if c.local_attn_size != -1 and current_end > self.global_end and n + self.local_end > size:
            evict = n + self.local_end - size
            sink = c.sink_size * c.frame_tokens
            keep = self.local_end - evict - sink
            self.k[:, sink : sink + keep] = self.k[:, sink + evict : sink + evict + keep].clone()
            self.v[:, sink : sink + keep] = self.v[:, sink + evict : sink + evict + keep].clone()
            new_local_end = self.local_end + (current_end - self.global_end) - evict
            c.evictions += 1
        else:
            new_local_end = self.local_end + (current_end - self.global_end)
        self.k[:, new_local_end - n : new_local_end] = k
        self.v[:, new_local_end - n : new_local_end] = v
        self.global_end, self.local_end = current_end, new_local_end
        return self.k[:, :new_local_end], self.v[:, :new_local_end]


class ShiftCopyCache:
    """The reference semantics (README §1.4) behind the cache interface the model calls."""

    def __init__(self, config: KVCacheConfig, spec):
        self.local_attn_size = config.window_frames
        self.sink_size = config.sink_frames
        self.frame_tokens = spec.frame_tokens
        frames = config.window_frames if config.window_frames != -1 else spec.max_frames
        self.size_tokens = frames * spec.frame_tokens
        self.layers = [_ShiftCopyLayer(self) for _ in range(spec.num_layers)]
        self.current_start = 0
        self.evictions = 0

    def begin(self, start_frame: int, num_frames: int) -> None:
        self.current_start = start_frame * self.frame_tokens

    def layer(self, i: int) -> _ShiftCopyLayer:
        return self.layers[i]


def tiny_model(num_layers: int = 1) -> CausalWanTransformer:
    torch.manual_seed(0)
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=num_layers)
    return CausalWanTransformer(cfg).eval()


def model_spec(model) -> KVCacheSpec:
    c = model.config
    return KVCacheSpec(c.num_layers, c.num_heads, c.head_dim, c.frame_tokens(4, 4), BLOCK)


def rollout(model, cache_config: KVCacheConfig, num_blocks: int, monkeypatch=None, watch=None):
    """Run the block loop (2 denoising steps + context pass per block); return the per-block latents."""
    sampling = SamplingConfig(denoising_steps=(1000, 500), block_frames=BLOCK)
    pipe = BlockDiffusionPipeline(model, sampling, cache_config)
    gen = torch.Generator().manual_seed(1)
    req = GenerationRequest(
        num_blocks=num_blocks, latent_height=4, latent_width=4, context=torch.randn(1, 4, 8, generator=gen), seed=3
    )
    outs = []
    for block in pipe.stream(req):
        outs.append(block.latents)
        pipe.settle()  # write the block's K/V now (stream() runs its context pass on the next block)
        if watch is not None:
            watch(block.index, pipe.kv_cache)
    return outs, pipe.kv_cache


@pytest.fixture(scope="module")
def reference_outputs():
    mp = pytest.MonkeyPatch()
    mp.setattr(block_diffusion, "create_kv_cache", ShiftCopyCache)
    try:
        outs, cache = rollout(tiny_model(), KVCacheConfig(window_frames=WINDOW, sink_frames=SINK), NUM_BLOCKS)
    finally:
        mp.undo()
    assert cache.evictions > 0
    return outs


KINDS = {
    "ring": {},
    "paged_p2": {"page_frames": 2},  # pages straddle blocks: partial-page eviction every block
    "offload": {"offload": "always", "page_frames": 3},
}  # (paged with P = 3 is the resident half of "offload"; the fixtures test it too)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: thread hand-off dominates and makes the 1,000-block runs 20x slower on busy CPUs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", list(KINDS))
def test_long_rollout_matches_shift_copy(kind, reference_outputs):
    config = dataclasses.replace(KVCacheConfig(window_frames=WINDOW, sink_frames=SINK), **KINDS[kind])
    seen: dict[int, dict] = {}

    def watch(index, cache):
        if index in (20, NUM_BLOCKS - 1):
            s = cache.stats()
            seen[index] = {key: s.get(key) for key in ("resident_bytes", "offloaded_bytes", "num_pages")}
            seen[index]["frames"] = s["resident_frames"]
            if hasattr(cache, "table"):  # live pages vary with alignment (P = 2) but stay within the pool
                assert len(cache.table) == cache.pool.num_used_pages <= cache.pool.num_pages

    outs, cache = rollout(tiny_model(), config, NUM_BLOCKS, watch=watch)
    for b, (got, ref) in enumerate(zip(outs, reference_outputs)):
        torch.testing.assert_close(got, ref, atol=ATOL, rtol=0, msg=lambda m, b=b: f"block {b}: {m}")
    # flat memory: the same bytes, pages, table rows and live frames at block 20 and block 999
    assert seen[20] == seen[NUM_BLOCKS - 1]
    assert seen[20]["frames"] == WINDOW
    assert cache.num_eviction_events == NUM_BLOCKS - 2  # every block from the third on evicts (7-frame window)


def test_offload_mixed_layers_bitwise_equal_to_resident():
    """4 layers, a budget for 1 resident layer + 2 staging buffers + 3 block buffers: layers mixed."""
    model = tiny_model(num_layers=4)
    base = KVCacheConfig(window_frames=WINDOW, sink_frames=SINK, page_frames=2)
    resident, _ = rollout(model, base, 40)
    frame_layer = 2 * 4 * 32 * 4  # K+V bytes of one frame of one layer (4 tokens × dim 32 × fp32)
    slots = planned_pages(base, model_spec(model)) * base.page_frames
    budget = 3 * slots * frame_layer + 3 * BLOCK * frame_layer
    assert budget == budget_for_offloaded(base, model_spec(model), 3)
    config = dataclasses.replace(base, offload="auto", gpu_budget_bytes=budget)
    outs, cache = rollout(model, config, 40)
    st = cache.stats()
    assert st["kind"] == "offload" and len(st["offloaded_layers"]) == 3, st
    assert st["prefetch_hit_rate"] == 1.0  # every offloaded layer was prefetched before it was needed
    assert st["h2d_bytes"] > 0 and st["d2h_bytes"] > 0
    for got, ref in zip(outs, resident):
        assert torch.equal(got, ref)
