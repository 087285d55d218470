"""The Wan FFN: the GELU in cuBLASLt's GEMM epilogue on CUDA is Wan's tanh GELU, elsewhere the modules as written."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inferix_core.models.wan.causal_transformer import FeedForward


def reference_ffn(ffn: FeedForward, x: torch.Tensor) -> torch.Tensor:
    """Wan's FFN in float64: Linear, tanh GELU, Linear."""
    w1, b1, w2, b2 = (t.double() for t in (ffn[0].weight, ffn[0].bias, ffn[2].weight, ffn[2].bias))
    return F.linear(F.gelu(F.linear(x.double(), w1, b1), approximate="tanh"), w2, b2)


def test_cpu_runs_the_modules_as_written():
    torch.manual_seed(0)
    ffn = FeedForward(48, 160).double()
    x = torch.randn(2, 37, 48, dtype=torch.float64)
    with torch.no_grad():
        out = ffn(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, reference_ffn(ffn, x), rtol=0, atol=1e-12)


def test_keys_are_wans():
    assert set(FeedForward(8, 16).state_dict()) == {"0.weight", "0.bias", "2.weight", "2.bias"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_epilogue_is_wans_tanh_gelu(compiled):
    """bf16 on CUDA takes `_addmm_activation` (eager: spied) and stays as close to the float64 tanh-GELU FFN
    as the two-pass FFN is."""
    torch.manual_seed(2)
    ffn = FeedForward(1536, 8960).to("cuda", torch.bfloat16)
    x = torch.randn(1, 4680, 1536, device="cuda", dtype=torch.bfloat16)
    calls = []
    real = torch._addmm_activation

    def spy(*a, **k):
        calls.append(k.get("use_gelu"))
        return real(*a, **k)

    run = torch.compile(ffn, dynamic=False) if compiled else ffn
    with torch.no_grad():
        if not compiled:
            torch._addmm_activation = spy
        try:
            fused = run(x)
        finally:
            torch._addmm_activation = real
        ffn.gelu_epilogue = False
        two_pass = ffn(x)
        ffn.gelu_epilogue = True
    if not compiled:
        assert calls == [True]
    ref = reference_ffn(ffn, x)
    err_fused = (fused.double() - ref).abs().max().item()
    err_two = (two_pass.double() - ref).abs().max().item()
    assert torch.isfinite(fused).all()
    assert err_fused <= 1.25 * err_two + 1e-3, (err_fused, err_two)
