"""Quantized KV pages: stated error bounds on random data, on the fixture rollouts and on a long rollout.

Bounds (relative error = ‖a − b‖ / ‖b‖, Frobenius) are about 1.2× what we measured (docs/kv_cache.md), so
a small systematic loss of precision shows (dividing by qmax − 1 instead of qmax moves the int8 fixture
rollout's max abs error from 1.03e-3 to 1.84e-3); the min-max code range itself is checked exactly:
  random K/V, window 21, sink 3, residual 3 — attention output: int8 0.0093 → < 0.011, int4 0.160 → < 0.19
  fixture rollouts (final latents vs the reference): relative to each fixture's own K/V rounding error
    (see REL_GAIN below), not fixed numbers, so fixtures of other sizes and magnitudes are judged alike
  400-block tiny-model rollout vs the exact cache, worst block: int8 8.6e-5 → < 1.05e-4, int4 1.50e-3 → < 1.8e-3
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from inferix_core.cache import KVCacheConfig, KVCacheSpec, create_kv_cache
from inferix_core.cache.quant import pack_int4, quantize, unpack_int4
from inferix_core.errors import ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline
from tests.cache.test_rollout import _one_thread, rollout, tiny_model  # noqa: F401 (module fixture)
from tests.fixture_utils import fixture_request
from tests.pipeline.test_parity import FILES, build


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_error_is_at_most_half_a_step(bits):
    x = torch.randn(2, 5, 7, 16) * torch.linspace(0.1, 10, 16)
    for dim in (1, 3):
        codes, scale, zero = quantize(x, dim=dim, bits=bits)
        assert codes.dtype == torch.uint8 and int(codes.max()) <= 2**bits - 1
        err = (codes.float() * scale + zero - x).abs()
        assert (err <= scale / 2 + 1e-5).all()


@pytest.mark.parametrize("bits", [8, 4])
def test_min_max_codes_span_the_whole_range(bits):
    """Asymmetric min-max: each group's minimum is code 0 and its maximum code 2^bits − 1, i.e. the step is
    (max − min) / (2^bits − 1), checked from x itself rather than from the returned scale."""
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(2, 5, 7, 16, generator=g) * torch.linspace(0.1, 10, 16)
    qmax = 2**bits - 1
    for dim in (1, 3):
        codes, scale, zero = quantize(x, dim=dim, bits=bits)
        assert (codes.amin(dim=dim) == 0).all() and (codes.amax(dim=dim) == qmax).all()
        lo, hi = x.amin(dim=dim, keepdim=True), x.amax(dim=dim, keepdim=True)
        step = (hi - lo) / qmax
        torch.testing.assert_close(scale, step)
        torch.testing.assert_close(zero, lo)
        assert ((codes.float() * scale + zero - x).abs() <= step / 2 * (1 + 1e-5) + 1e-6).all()


def test_int4_pack_roundtrip():
    codes = torch.randint(0, 16, (3, 4, 2, 8), dtype=torch.uint8)
    packed = pack_int4(codes)
    assert packed.shape[-1] == 4 and torch.equal(unpack_int4(packed), codes)


@pytest.mark.parametrize("q,bound", [("int8", 0.011), ("int4", 0.19)])
def test_attention_error_on_random_data(q, bound):
    g = torch.Generator().manual_seed(0)
    spec = KVCacheSpec(1, 4, 32, 64, 3)
    exact = create_kv_cache(KVCacheConfig(window_frames=21, sink_frames=3), spec)
    quant = create_kv_cache(KVCacheConfig(window_frames=21, sink_frames=3, quantization=q), spec)
    for b in range(12):
        k = torch.randn(1, 192, 4, 32, generator=g) * (1 + 3 * torch.rand(1, 1, 1, 32, generator=g))  # channel outliers
        v = torch.randn(1, 192, 4, 32, generator=g)
        query = torch.randn(1, 192, 4, 32, generator=g).transpose(1, 2)
        exact.begin(3 * b, 3)
        quant.begin(3 * b, 3)
        exact.layer(0).update(k, v)
        kq, vq = quant.layer(0).update(k, v)
        ke, ve = exact.logical_kv(0)  # chronological, as the quantized cache returns
        assert kq.shape == ke.shape
        out_e = F.scaled_dot_product_attention(query, ke.transpose(1, 2), ve.transpose(1, 2))
        out_q = F.scaled_dot_product_attention(query, kq.transpose(1, 2), vq.transpose(1, 2))
        assert rel(out_q, out_e) < bound, b
    s = quant.stats()
    assert s["resident_bytes"] < (0.6 if q == "int8" else 0.5) * exact.stats()["resident_bytes"]
    assert s["quantized_frame_layers"] > 0


def test_residual_window_frames_are_exact():
    """Sink frames and the last residual_frames frames come back bitwise; the block being denoised is exact."""
    spec = KVCacheSpec(1, 2, 8, 4, 3)
    quant = create_kv_cache(KVCacheConfig(window_frames=9, sink_frames=1, quantization="int4"), spec)
    exact = create_kv_cache(KVCacheConfig(window_frames=9, sink_frames=1), spec)
    for b in range(6):
        k, v = torch.randn(1, 12, 2, 8), torch.randn(1, 12, 2, 8)
        for c in (quant, exact):
            c.begin(3 * b, 3)
            c.layer(0).update(k, v)
    kq, _ = quant.logical_kv(0)
    ke, _ = exact.logical_kv(0)
    assert torch.equal(kq[:, :4], ke[:, :4])  # sink frame
    assert torch.equal(kq[:, -12:], ke[:, -12:])  # residual frames
    assert not torch.equal(kq, ke)


def test_residual_must_cover_a_block():
    with pytest.raises(ConfigError):
        create_kv_cache(
            KVCacheConfig(window_frames=9, quantization="int8", residual_frames=2), KVCacheSpec(1, 1, 2, 2, 3)
        )


def rounding_error(kv: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """Squared RMS rounding error, summed, of min-max codes over `dim`: each group's step is its own
    (max − min) / (2^bits − 1), and rounding to it errs by step²/12 per element on average (uniform error)."""
    step = (kv.amax(dim=dim, keepdim=True) - kv.amin(dim=dim, keepdim=True)).double() / (2**bits - 1)
    return (step.pow(2) / 12).expand_as(kv).sum()


def stored_kv_error(pipe, model, req, bits: int) -> float:
    """The fixture's own quantization scale: the relative RMS error min-max rounding puts into the K/V that
    the exact run stores (keys per channel over a frame's tokens, values per token over the head, as the
    quantized cache groups them), worst over blocks and layers. Computed from the K/V, not by our quantizer."""
    worst = 0.0
    for _ in pipe.stream(req):
        pipe.settle()
        c = pipe.kv_cache
        ft = c.spec.frame_tokens
        for layer in range(model.config.num_layers):
            k, v = c.logical_kv(layer)
            k = k.unflatten(1, (k.shape[1] // ft, ft))
            for x, dim in ((k, 2), (v, 3)):
                worst = max(worst, (rounding_error(x, dim, bits) / x.double().pow(2).sum()).sqrt().item())
    return worst


# The rollout's error relative to the fixture's own scale, eps = the relative rounding error of the K/V it
# stores (stored_kv_error). Measured on the shipped fixtures: ‖out − ref‖ / ‖ref‖ = 0.027–0.035 · eps and
# max |out − ref| = 0.035–0.051 · eps · max |ref|, for int8 and int4 alike (the error is diluted: only frames
# past the residual window are quantized, attention averages over many keys, and each block is renoised from
# fresh noise). The bounds are 0.25 · eps and 0.35 · eps · max |ref|: about 7× headroom for runs of other
# sizes, windows and lengths, while an error reaching the output undiluted (a wrong scale, zero point or code
# order) lands at ≥ eps.
REL_GAIN, ABS_GAIN = 0.25, 0.35


@pytest.mark.parametrize("q,bits", [("int8", 8), ("int4", 4)])
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_fixture_rollout_error(path, q, bits):
    info, t, model, sampling, base = build(path)
    p = info["pipeline"]
    # the fewest full-precision frames the quantized cache allows (the block being denoised), so that as many
    # frames as the fixture's window holds past its sink and that block are quantized
    base = dataclasses.replace(base, residual_frames=sampling.block_frames)
    if not base.is_global and base.sink_frames + base.residual_frames >= base.window_frames:
        pytest.skip(f"window {base.window_frames} holds only the sink and one block: no frame is ever quantized")

    def request():
        return fixture_request(p, t)

    eps = stored_kv_error(BlockDiffusionPipeline(model, sampling, base), model, request(), bits)
    pipe = BlockDiffusionPipeline(model, sampling, dataclasses.replace(base, quantization=q))
    out = pipe.generate(request())
    ref = t["output_latents"]
    assert torch.isfinite(out).all()
    assert rel(out, ref) < REL_GAIN * eps, (rel(out, ref), eps)
    assert (out - ref).abs().max() < ABS_GAIN * eps * ref.abs().max(), ((out - ref).abs().max(), eps)
    assert pipe.kv_cache.stats()["quantized_frame_layers"] > 0
    assert pipe.kv_cache.num_eviction_events == info["trace"]["evictions_per_layer"]


@pytest.mark.parametrize("q,bound", [("int8", 1.05e-4), ("int4", 1.8e-3)])
def test_long_rollout_stays_finite_and_close(q, bound):
    model = tiny_model()
    base = KVCacheConfig(window_frames=12, sink_frames=1)
    exact, _ = rollout(model, base, 400)
    quant, cache = rollout(model, dataclasses.replace(base, quantization=q), 400)
    worst = max(rel(a, b) for a, b in zip(quant, exact))
    assert all(torch.isfinite(a).all() for a in quant)
    assert worst < bound, worst
    assert cache.stats()["resident_bytes"] < create_kv_cache(base, cache.spec).stats()["resident_bytes"]
