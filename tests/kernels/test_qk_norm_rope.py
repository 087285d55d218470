"""The fused q/k RMSNorm + RoPE kernel against a float64 statement of Wan's arithmetic and the unfused modules.

On the CPU the kernel runs in Triton's interpreter (in a subprocess: `TRITON_INTERPRET` is read when a kernel is
defined), which converts to bfloat16 by truncation rather than rounding to nearest; so there the float16 run
is held to the exact roundings and the bfloat16 run to one unit in the last place. On CUDA the kernel is held
to the unfused modules' own results, eagerly and inside `torch.compile`, and the modules must route to it.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.kernels import qk_norm_rope as fused
from inferix_core.models.wan.layers import RotaryEmbedding3D
from tests.kernels.interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not fused.triton_available(), reason="Triton is not installed")

# (batch, frames, height, width, heads, head_dim, first frame): widths that are and are not powers of two
SHAPES = [(2, 2, 3, 4, 3, 16, 5), (1, 3, 2, 2, 4, 32, 0), (2, 1, 5, 3, 2, 24, 11)]


def spec(x: torch.Tensor, weight: torch.Tensor, freqs: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
    """Wan's q/k path in float64 with its roundings: RMSNorm, round, × weight, round, rotate pairs."""
    dtype = x.dtype
    x64 = x.double()
    normed = (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)).to(dtype).double()
    p = (normed * weight.double()).to(dtype).double()
    p = p.unflatten(-1, (heads, -1, 2))  # (B, L, H, pairs, 2)
    cos, sin = freqs[..., 0].double(), freqs[..., 1].double()  # (L, 1, pairs)
    out = torch.stack((p[..., 0] * cos - p[..., 1] * sin, p[..., 1] * cos + p[..., 0] * sin), dim=-1)
    return out.flatten(2)


def make_inputs(shape, dtype, device, seed):
    b, f, h, w, heads, head_dim, f0 = shape
    g = torch.Generator().manual_seed(seed)
    width, seq = heads * head_dim, f * h * w
    q, k = (torch.randn(b, seq, width, generator=g).mul(3).to(dtype).to(device) for _ in range(2))
    wq, wk = (torch.randn(width, generator=g).add(1).to(dtype).to(device) for _ in range(2))
    freqs = RotaryEmbedding3D(head_dim).freqs(torch.arange(f0, f0 + f), h, w, torch.device(device))
    return q, k, wq, wk, freqs, heads


def ulp(want: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype` at each rotated pair's length (a rotation keeps it; an output near zero
    by cancellation is as exact as its pair's larger operand allows, not more)."""
    pairs = want.unflatten(-1, (-1, 2))
    length = pairs.norm(dim=-1, keepdim=True).expand_as(pairs).flatten(-2)
    tiny = torch.finfo(dtype).tiny
    return torch.exp2(torch.floor(torch.log2(length.clamp_min(tiny)))) * torch.finfo(dtype).eps


_INTERPRETED = """
import json, sys, torch
sys.path.insert(0, {root!r})
from tests.kernels.test_qk_norm_rope import SHAPES, make_inputs, spec, ulp
from inferix_core.kernels.qk_norm_rope import qk_norm_rope
out = []
for dtype in (torch.float16, torch.bfloat16):
    for i, shape in enumerate(SHAPES):
        q, k, wq, wk, freqs, heads = make_inputs(shape, dtype, "cpu", 100 + i)
        with torch.no_grad():
            got = qk_norm_rope(q, k, wq, wk, freqs, 1e-6)
        for x, w, y in zip((q, k), (wq, wk), got):
            want = spec(x, w, freqs, heads, 1e-6)
            err = (y.double() - want).abs()
            out.append(dict(dtype=str(dtype), finite=bool(torch.isfinite(y).all()), shape=list(y.shape),
                            want_shape=list(want.shape), dtype_out=str(y.dtype),
                            ulps=float((err / ulp(want, dtype)).max()), max_abs=float(err.max())))
print(json.dumps(out))
"""


def test_interpreted_kernel_is_wans_arithmetic():
    rows = run_interpreted(_INTERPRETED)
    assert len(rows) == 2 * 2 * len(SHAPES)
    for r in rows:
        assert r["finite"] and r["shape"] == r["want_shape"] and r["dtype_out"] == r["dtype"], r
        # float16: the interpreter rounds as the GPU does, so only the final rounding (half an ulp) and float32
        # arithmetic remain; bfloat16: its truncating casts cost up to about an ulp each, three times over (3.5 seen)
        assert r["ulps"] <= (0.51 if r["dtype"] == "torch.float16" else 4.0), r


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_kernel_matches_unfused_modules(dtype):
    from inferix_core.models.wan import causal_transformer as ct
    from inferix_core.models.wan.config import WanConfig

    torch.manual_seed(7)
    cfg = WanConfig(dim=128, ffn_dim=256, num_heads=4, num_layers=1, text_len=8, text_dim=32, freq_dim=32)
    attn = ct.SelfAttention(cfg).to("cuda", dtype)
    with torch.no_grad():
        for norm in (attn.norm_q, attn.norm_k):
            norm.weight.copy_(torch.randn_like(norm.weight).add(1))
    b, f, h, w = 2, 3, 4, 5
    x = torch.randn(b, f * h * w, cfg.dim, device="cuda", dtype=dtype)
    freqs = RotaryEmbedding3D(cfg.head_dim).freqs(torch.arange(2, 2 + f), h, w, torch.device("cuda"))
    calls = []
    real = ct.qk_norm_rope
    try:
        ct.qk_norm_rope = lambda *a: calls.append(1) or real(*a)
        with torch.no_grad():
            fused_out = attn(x, freqs)
        assert calls, "SelfAttention did not route to the fused kernel on CUDA"
    finally:
        ct.qk_norm_rope = real
    with torch.no_grad():
        attn.fused_norm_rope = False
        unfused_out = attn(x, freqs)
        attn.fused_norm_rope = True
        compiled_out = torch.compile(attn, fullgraph=False)(x, freqs)
    assert torch.isfinite(fused_out).all()
    scale = unfused_out.float().abs().max()
    for got in (fused_out, compiled_out):
        torch.testing.assert_close(got.float(), unfused_out.float(), rtol=0, atol=float(scale) * 2e-2)
    # the kernel alone, against the float64 statement: no worse than the unfused modules
    q, k, wq, wk, fr, heads = make_inputs(SHAPES[0], dtype, "cuda", 3)
    with torch.no_grad():
        got_q, got_k = fused.qk_norm_rope(q, k, wq, wk, fr, 1e-6)
    for x_in, wt, got in ((q, wq, got_q), (k, wk, got_k)):
        want = spec(x_in.cpu(), wt.cpu(), fr.cpu(), heads, 1e-6).cuda()
        assert float(((got.double() - want).abs() / ulp(want, dtype)).max()) <= 1.01


def test_operands_the_kernel_cannot_take_go_to_the_modules():
    q, k, wq, wk, freqs, _ = make_inputs(SHAPES[0], torch.bfloat16, "cpu", 1)
    assert not fused.fused_qk_norm_rope_supported(q, k, wq, wk, freqs)  # CPU tensors: the modules
    assert fused.operands_fit(q, k, wq, wk, freqs)
    assert not fused.operands_fit(q.float(), k.float(), wq.float(), wk.float(), freqs)  # float32
    assert not fused.operands_fit(q, k, wq.float(), wk, freqs)  # weight of another dtype
    assert not fused.operands_fit(q, k, wq, wk, freqs.double())  # the table must be float32
    assert not fused.operands_fit(q, k, wq, wk, freqs[:-1])  # one table row per token
    assert not fused.operands_fit(q[:, :, ::2], k[:, :, ::2], wq[::2], wk[::2], freqs)  # strided features
    assert not fused.operands_fit(q.transpose(0, 1).contiguous().transpose(0, 1), k, wq, wk, freqs)  # batch
