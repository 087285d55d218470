"""Block swap on a GPU: the side-stream copies and events keep results bitwise those of the resident model."""

from __future__ import annotations

import copy

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.models.block_swap import enable_block_swap
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swapped_stream_equals_resident_on_cuda(dtype):
    cfg = WanConfig(dim=256, ffn_dim=512, freq_dim=64, text_dim=64, text_len=16, num_heads=4, num_layers=8)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = CausalWanTransformer(cfg).to(dtype).eval().requires_grad_(False)
    swapped = copy.deepcopy(model)
    swap = enable_block_swap(swapped, 2)
    torch.cuda.empty_cache()
    assert swap.swapped == list(range(2, 8))
    ctx = torch.randn(1, 16, 64, device="cuda", dtype=dtype)
    outs = []
    for m in (model, swapped):
        pipe = BlockDiffusionPipeline(m, SamplingConfig(), KVCacheConfig(window_frames=6, sink_frames=1))
        req = GenerationRequest(num_blocks=4, latent_height=16, latent_width=24, context=ctx, seed=0)
        outs.append(torch.cat([b.latents for b in pipe.stream(req)], dim=1))
    assert torch.isfinite(outs[0]).all()
    assert torch.equal(outs[0], outs[1])
