"""bench/kernel_efficiency.py's FLOP count, against torch's FlopCounterMode per module, on the CPU.

The profile (`bench/profile_engine.py --efficiency`) sets every group's kernel time against the FLOPs of the
run's calls; those calls are read from the cache as the pipeline runs (`record_calls`). Here on a tiny
random model: the calls are the block schedule (keys grow by one block, the last block's context pass is
skipped as users get it), and the block linears' analytic FLOPs equal what FlopCounterMode counts inside
the blocks.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.kernel_efficiency import analytic_flops, flop_counter_mode
from bench.profile_engine import record_calls
from inferix_core.cache import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

CFG = WanConfig(dim=64, ffn_dim=96, freq_dim=16, text_dim=8, text_len=8, num_heads=2, num_layers=3)
BLOCKS, FRAMES, STEPS = 3, 2, 4


def test_calls_and_block_flops_match_flop_counter():
    torch.manual_seed(0)
    pipe = BlockDiffusionPipeline(
        CausalWanTransformer(CFG).eval(), SamplingConfig(block_frames=FRAMES), KVCacheConfig()
    )
    calls = record_calls(pipe)
    request = GenerationRequest(BLOCKS, 4, 6, torch.randn(1, 8, 8), final_context_pass=False)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        latents = pipe.generate(request)
    assert torch.isfinite(latents).all()
    tokens = FRAMES * CFG.frame_tokens(4, 6)
    expected = [(tokens, (b + 1) * tokens) for b in range(BLOCKS) for _ in range(STEPS + (b < BLOCKS - 1))]
    assert calls == expected
    counts = counter.get_flop_counts()
    in_blocks = sum(sum(counts[f"CausalWanTransformer.blocks.{i}"].values()) for i in range(CFG.num_layers))
    flops = analytic_flops(CFG, calls)
    assert flops["gemm"] == in_blocks > 0
    assert flops["attention_self"] == sum(4 * q * k * CFG.dim * CFG.num_layers for q, k in expected)


def test_gelu_epilogue_addmm_is_counted():
    """The FFN up-projection runs as `aten._addmm_activation` in bf16 on CUDA; FlopCounterMode alone counts
    it as nothing, so the profile's GEMM rate read 40 % of what the kernels did."""
    g = torch.Generator().manual_seed(5)
    m, k, n = (int(v) for v in torch.randint(3, 40, (3,), generator=g))
    bias, a, b = torch.randn(n, generator=g), torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    bare, counted = FlopCounterMode(display=False), flop_counter_mode()
    with bare:
        torch._addmm_activation(bias, a, b, use_gelu=True)
    with counted:
        out = torch._addmm_activation(bias, a, b, use_gelu=True)
    assert torch.isfinite(out).all()
    assert bare.get_total_flops() == 0  # the gap the custom formula closes
    assert counted.get_total_flops() == 2 * m * k * n
