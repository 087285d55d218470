"""The fused adaLN kernel (LayerNorm + per-frame modulation, with and without the residual add before it)
against a float64 statement of the eager modules' arithmetic, and on CUDA against the modules themselves.

As in test_qk_norm_rope.py, on the CPU the kernel runs in Triton's interpreter in a subprocess; float16 is held
to the exact roundings, bfloat16 (converted by truncation there) to a few units in the last place.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from inferix_core.kernels import layer_norm_modulate as fused
from inferix_core.kernels.lazy_ops import triton_available
from tests.kernels.interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_available(), reason="Triton is not installed")

# (batch, frames, tokens per frame, width): widths that are and are not powers of two
SHAPES = [(2, 3, 5, 48), (1, 2, 7, 64), (2, 1, 4, 40)]


def make_inputs(shape, dtype, device, seed):
    """x, a residual, and shift/scale as the block makes them: strided per-frame views of one tensor."""
    b, f, hw, width = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, f * hw, width, generator=g).mul(2).add(0.5).to(dtype).to(device)
    res = torch.randn(b, f * hw, width, generator=g).to(dtype).to(device)
    mod = torch.randn(b, f, 6, width, generator=g).to(dtype).to(device)
    shift = mod[:, :, 0:1]  # stride 6·width between frames
    scale = (1 + mod[:, :, 1::3]).chunk(2, dim=2)[0]  # stride 2·width
    return x, res, shift, scale


@contextlib.contextmanager
def counting_kernel_calls():
    """The names of the fused kernels the blocks call ("ln", "add"), in order."""
    from inferix_core.models.wan import causal_transformer as ct

    calls: list[str] = []
    real = ct.layer_norm_modulate, ct.add_layer_norm_modulate
    ct.layer_norm_modulate = lambda *a: calls.append("ln") or real[0](*a)
    ct.add_layer_norm_modulate = lambda *a: calls.append("add") or real[1](*a)
    try:
        yield calls
    finally:
        ct.layer_norm_modulate, ct.add_layer_norm_modulate = real


def spec(x, shift, scale, eps, residual=None):
    """float64, with the eager modules' roundings: (x + r) rounded, LayerNorm rounded, shift + n·scale."""
    dtype = x.dtype
    if residual is not None:
        x = (x.double() + residual.double()).to(dtype)
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = (x64 - mean).pow(2).mean(-1, keepdim=True)
    normed = ((x64 - mean) * torch.rsqrt(var + eps)).to(dtype).double()
    frames = shift.shape[1]
    terms = shift.double(), normed.unflatten(1, (frames, -1)) * scale.double()
    h = (terms[0] + terms[1]).flatten(1, 2)
    magnitude = (terms[0].abs() + terms[1].abs()).flatten(1, 2)  # what the rounding errors scale with
    return x, h, magnitude


def ulps(got: torch.Tensor, want: torch.Tensor, dtype, magnitude: torch.Tensor | None = None) -> float:
    """max |got − want| in units of the dtype's spacing at the terms' magnitude (|want| if not given)."""
    mag = (want.abs() if magnitude is None else magnitude).double().clamp_min(torch.finfo(dtype).tiny)
    spacing = torch.exp2(torch.floor(torch.log2(mag))) * torch.finfo(dtype).eps
    return float(((got.double() - want) / spacing).abs().max())


_INTERPRETED = """
import json, sys, torch
sys.path.insert(0, {root!r})
from tests.kernels.test_layer_norm_modulate import SHAPES, make_inputs, spec, ulps
from inferix_core.kernels.layer_norm_modulate import add_layer_norm_modulate, layer_norm_modulate
out = []
for dtype in (torch.float16, torch.bfloat16):
    for i, shape in enumerate(SHAPES):
        x, res, shift, scale = make_inputs(shape, dtype, "cpu", 200 + i)
        with torch.no_grad():
            h = layer_norm_modulate(x, shift, scale, 1e-6)
            x2, h2 = add_layer_norm_modulate(x, res, shift, scale, 1e-6)
        _, want_h, mag = spec(x, shift, scale, 1e-6)
        want_x2, _, _ = spec(x, shift, scale, 1e-6, res)
        # h of the sum the kernel wrote (the interpreter's bfloat16 sum may be an ulp off the rounded one,
        # which moves the row's mean and variance; checked on its own)
        _, want_h2, mag2 = spec(x2, shift, scale, 1e-6)
        for name, got, want, m in (("h", h, want_h, mag), ("x+r", x2, want_x2.double(), x.abs() + res.abs()),
                                   ("h of x+r", h2, want_h2, mag2)):
            out.append(dict(dtype=str(dtype), what=name, finite=bool(torch.isfinite(got).all()),
                            same_shape=list(got.shape) == list(want.shape), dtype_out=str(got.dtype),
                            ulps=ulps(got, want, dtype, m)))
print(json.dumps(out))
"""


def test_interpreted_kernel_is_the_modules_arithmetic():
    rows = run_interpreted(_INTERPRETED)
    assert len(rows) == 2 * 3 * len(SHAPES)
    for r in rows:
        assert r["finite"] and r["same_shape"] and r["dtype_out"] == r["dtype"], r
        # float16: only the final rounding and float32 arithmetic remain; bfloat16: truncating casts
        assert r["ulps"] <= (0.51 if r["dtype"] == "torch.float16" else 4.0), r


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_block_matches_unfused_modules(dtype):
    from inferix_core.models.wan import causal_transformer as ct
    from inferix_core.models.wan.config import WanConfig
    from inferix_core.models.wan.layers import RotaryEmbedding3D

    torch.manual_seed(11)
    cfg = WanConfig(dim=128, ffn_dim=256, num_heads=4, num_layers=1, text_len=8, text_dim=32, freq_dim=32)
    block = ct.AttentionBlock(cfg).to("cuda", dtype).eval()
    b, f, h, w = 2, 3, 4, 5
    x = torch.randn(b, f * h * w, cfg.dim, device="cuda", dtype=dtype)
    e0 = torch.randn(b, f, 6, cfg.dim, device="cuda", dtype=dtype) * 0.3
    freqs = RotaryEmbedding3D(cfg.head_dim).freqs(torch.arange(f), h, w, torch.device("cuda"))
    ctx = torch.randn(b, cfg.text_len, cfg.dim, device="cuda", dtype=dtype)
    with torch.no_grad():
        ctx_k, ctx_v = block.cross_attn.context_kv(ctx)
    with counting_kernel_calls() as calls, torch.no_grad():
        fused_out = block(x, e0, freqs, ctx_k, ctx_v, f)
    assert calls == ["ln", "add"], calls
    with torch.no_grad():
        block.fused_norms = False
        unfused_out = block(x, e0, freqs, ctx_k, ctx_v, f)
        block.fused_norms = True
        compiled_out = torch.compile(block)(x, e0, freqs, ctx_k, ctx_v, f)
    assert torch.isfinite(fused_out).all()
    scale = float(unfused_out.float().abs().max())
    for got in (fused_out, compiled_out):
        torch.testing.assert_close(got.float(), unfused_out.float(), rtol=0, atol=scale * 2e-2)
    # the kernels alone against the float64 statement
    xs, res, shift, sc = make_inputs(SHAPES[0], dtype, "cuda", 5)
    with torch.no_grad():
        got_h = fused.layer_norm_modulate(xs, shift, sc, 1e-6)
        got_x, got_h2 = fused.add_layer_norm_modulate(xs, res, shift, sc, 1e-6)
    _, want_h, mag = spec(xs.cpu(), shift.cpu(), sc.cpu(), 1e-6)
    want_x, want_h2, mag2 = spec(xs.cpu(), shift.cpu(), sc.cpu(), 1e-6, res.cpu())
    assert ulps(got_h.cpu(), want_h, dtype, mag) <= 0.51
    assert ulps(got_h2.cpu(), want_h2, dtype, mag2) <= 0.51
    assert torch.equal(got_x.cpu(), want_x)


def test_operands_the_kernel_cannot_take_go_to_the_modules():
    x, res, shift, scale = make_inputs(SHAPES[0], torch.bfloat16, "cpu", 1)
    assert not fused.fused_layer_norm_modulate_supported(x, shift, scale)  # CPU tensors: the modules
    assert fused.operands_fit(x, shift, scale) and fused.operands_fit(x, shift, scale, res)
    assert not fused.operands_fit(x.float(), shift.float(), scale.float())  # float32 stream
    assert not fused.operands_fit(x, shift.float(), scale)  # mixed dtypes
    assert not fused.operands_fit(x.transpose(0, 1).contiguous().transpose(0, 1), shift, scale)  # rows strided
    assert not fused.operands_fit(x, shift, scale, res.transpose(0, 1).contiguous().transpose(0, 1))
    assert not fused.operands_fit(x, shift[:, :2], scale[:, :2])  # frames that do not divide the tokens
    assert not fused.operands_fit(x, shift[:1], scale[:1])  # one modulation row for two batch items
    assert not fused.operands_fit(x[..., :32].contiguous(), shift, scale)  # width mismatch


@pytest.mark.cuda
def test_cuda_transformer_takes_the_kernel_in_every_block():
    """The residual stream reaches every block token-major (row_major_stream), so each takes both kernels."""
    from inferix_core.models.wan import causal_transformer as ct
    from inferix_core.models.wan.config import WanConfig

    torch.manual_seed(2)
    cfg = WanConfig(dim=64, ffn_dim=128, num_heads=4, num_layers=3, text_len=8, text_dim=32, freq_dim=32)
    model = ct.CausalWanTransformer(cfg).to("cuda", torch.bfloat16).eval()
    x = torch.randn(1, cfg.in_dim, 3, 8, 10, device="cuda", dtype=torch.bfloat16)
    t = torch.full((1, 3), 500.0, device="cuda")
    ctx = torch.randn(1, cfg.text_len, cfg.text_dim, device="cuda", dtype=torch.bfloat16)
    with counting_kernel_calls() as calls, torch.no_grad():
        out = model(x, t, ctx)
    assert calls == ["ln", "add"] * cfg.num_layers, calls
    with torch.no_grad():
        model.row_major_stream = False
        for block in model.blocks:
            block.fused_norms = False
        before = model(x, t, ctx)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), before.float(), rtol=0, atol=float(before.abs().max()) * 2e-2)
