"""Half-precision paths run the same math: bf16 and fp16 stay within their tolerance of fp32 on the fixtures."""

from __future__ import annotations

import pytest
import torch

from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from tests.pipeline.test_parity import FILES, FixtureNoise, build


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_half_precision_close_to_fp32(path, dtype, tol):
    info, t, model, sampling, cache = build(path)
    p = info["pipeline"]
    B, _, _, H, W = p["latent_shape"]

    def run(m, ctx):
        req = GenerationRequest(p["num_blocks"], H, W, ctx, batch_size=B, noise=FixtureNoise(t))
        return BlockDiffusionPipeline(m, sampling, cache).generate(req).float()

    ref = run(model, t["text_context"])
    half = run(model.to(dtype), t["text_context"].to(dtype))
    assert torch.isfinite(half).all()
    rel = ((half - ref).norm() / ref.norm()).item()
    assert rel < tol, f"{dtype}: relative error {rel:.2e} vs fp32"
    assert rel > 0  # really ran in lower precision
