"""The side-by-side harness's context check (bench/compare_comfy_core.py `context_effect`) can fail.

It tells a causal model that reads its KV cache (block 1 moves when block 0's noise changes) from one that
does not (block 1 unchanged: exactly 0), which is what a compiled graph with stale cache offsets does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from compare_comfy_core import CoreNoise, context_effect

from inferix_core.clients.benchmark import BenchConfig, build_engine
from inferix_core.pipeline import GenerationRequest


def _ours(x: torch.Tensor, pipe, context) -> torch.Tensor:
    req = GenerationRequest(2, x.shape[-2], x.shape[-1], context, seed=0, noise=CoreNoise(x, 0))
    with torch.no_grad():
        return pipe.generate(req).permute(0, 2, 1, 3, 4)


def test_context_effect_sees_the_cache_and_catches_a_model_that_ignores_it():
    pipe, context = build_engine(BenchConfig(preset="tiny", device="cpu", dtype="fp32"))
    for p in pipe.model.parameters():  # fresh values everywhere (the init zeroes the head)
        p.data = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel() % 97)) * 0.1
    n = pipe.sampling.block_frames
    x = torch.randn(1, 16, 2 * n, 8, 12, generator=torch.Generator().manual_seed(5))
    assert context_effect(lambda lat: _ours(lat, pipe, context), x, n) > 1e-5  # random weights: weak but real

    def no_cache(lat: torch.Tensor) -> torch.Tensor:  # each block sampled alone: block 0 is never seen
        return torch.cat([_ours_block(lat[:, :, b * n : (b + 1) * n]) for b in range(2)], dim=2)

    def _ours_block(block: torch.Tensor) -> torch.Tensor:
        req = GenerationRequest(1, block.shape[-2], block.shape[-1], context, seed=0, noise=CoreNoise(block, 0))
        with torch.no_grad():
            return pipe.generate(req).permute(0, 2, 1, 3, 4)

    assert context_effect(no_cache, x, n) == 0.0
