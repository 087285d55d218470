"""`VAEDecodeOptions`: every speed route decodes the same frames as the reference path.

On CPU in fp32 each option (and all together) must match the reference stream decode to 1e-5 on fresh
random latents, and must actually take its route (spied on, so a silently ignored flag fails). On CUDA
the options must stay within bf16 tolerance of the reference, and no less accurate against fp32.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from inferix_core.vae import SpatialTiling, VAEDecodeOptions, WanVAE
from inferix_core.vae import layers as vae_layers
from inferix_core.vae import wan_vae as vae_module

ATOL = 1e-5
SINGLE = {
    "channels_last": VAEDecodeOptions(channels_last=True),
    "cudnn_benchmark": VAEDecodeOptions(cudnn_benchmark=True),
    "fused_cache": VAEDecodeOptions(fused_cache=True),
    "subpixel_upsample": VAEDecodeOptions(subpixel_upsample=True),
    "all": VAEDecodeOptions.fast(),
}
CHUNKS = [3, 2, 1]  # a first block, a later one, a 1-latent block (its time history spans two calls)


def _latents(z_dim: int, frames: int = sum(CHUNKS), h: int = 3, w: int = 5, seed: int = 0) -> torch.Tensor:
    """Fresh random latents; odd h, w exercise the sub-pixel upsample's borders."""
    return torch.randn(1, z_dim, frames, h, w, generator=torch.Generator().manual_seed(seed))


def _stream(
    vae: WanVAE, z: torch.Tensor, options: VAEDecodeOptions | None, chunks: list[int] = CHUNKS, **kwargs
) -> torch.Tensor:
    dec, outs, start = vae.stream_decoder(options=options, **kwargs), [], 0
    for n in chunks:
        outs.append(dec.decode(z[:, :, start : start + n]))
        start += n
    return torch.cat(outs, dim=2)


class _Spy:
    """Counts calls to a module-level function (patched where it is looked up) and forwards them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, targets: list[tuple[object, str]]) -> None:
        self.calls = 0
        original = getattr(*targets[0])

        def spy(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        for owner, name in targets:
            monkeypatch.setattr(owner, name, spy)


def _expect_route(name: str, vae: WanVAE, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Arm checks that the option's route runs; returns a function asserting it did."""
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    seen: dict[str, list] = {"layout": [], "benchmark": []}
    vae.decoder.register_forward_pre_hook(
        lambda _m, args: seen["layout"].append(args[0].is_contiguous(memory_format=torch.channels_last_3d))
    )
    vae.decoder.register_forward_pre_hook(lambda _m, _a: seen["benchmark"].append(torch.backends.cudnn.benchmark))
    fused = _Spy(monkeypatch, [(vae_layers, "norm_silu_padded"), (vae_module, "norm_silu_padded")])
    subpixel = _Spy(monkeypatch, [(vae_layers, "_fold_taps")])
    opts = SINGLE[name]

    def check() -> None:
        assert seen["layout"] and all(seen["layout"]) == opts.channels_last
        assert all(seen["benchmark"]) == opts.cudnn_benchmark
        assert (fused.calls > 0) == opts.fused_cache
        assert (subpixel.calls > 0) == opts.subpixel_upsample
        if opts.channels_last:
            assert vae.decoder.head[2].weight.is_contiguous(memory_format=torch.channels_last_3d)

    return check


_REFERENCE: dict[Path, tuple[torch.Tensor, torch.Tensor]] = {}


def _reference(vae_fixture) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random latents and their reference stream decode, computed once per fixture file."""
    if vae_fixture.path not in _REFERENCE:
        z = _latents(vae_fixture.vae.config.z_dim, seed=1)
        _REFERENCE[vae_fixture.path] = z, _stream(vae_fixture.vae, z, None)
    return _REFERENCE[vae_fixture.path]


@pytest.mark.parametrize("name", list(SINGLE))
def test_option_stream_equals_reference(vae_fixture, name, monkeypatch):
    z, reference = _reference(vae_fixture)
    vae = copy.deepcopy(vae_fixture.vae)  # channels_last converts weights in place: keep the shared model as is
    check = _expect_route(name, vae, monkeypatch)
    out = _stream(vae, z, SINGLE[name])
    check()
    assert torch.backends.cudnn.benchmark is False  # scoped to the decode, not leaked
    assert out.shape == reference.shape and not out.isnan().any()
    assert reference.abs().max() > 0.1  # a real signal, not a decode of zeros
    torch.testing.assert_close(out, reference, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["fused_cache", "all"])
def test_option_full_decode_matches_fixture(vae_fixture, name):
    """Frame-by-frame full decode (the reference's own loop) with the options still equals the stored output."""
    vae = copy.deepcopy(vae_fixture.vae)
    step = vae_fixture.info["decode"]["latent_frames_per_decoder_call"]
    out = vae.decode(vae_fixture.tensors["z"], latent_frames_per_step=step, options=SINGLE[name])
    torch.testing.assert_close(out, vae_fixture.decoded, atol=ATOL, rtol=0)
    torch.testing.assert_close(out, vae_fixture.tensors["decode_output"], atol=1e-4, rtol=0)


def test_whole_block_in_one_pass_equals_frame_by_frame(vae_fixture):
    """The stream decodes a whole block in one decoder call; the reference loops one latent frame at a time."""
    vae = copy.deepcopy(vae_fixture.vae)
    z, reference = _reference(vae_fixture)
    per_frame = vae.decode(z, latent_frames_per_step=1)
    torch.testing.assert_close(reference, per_frame, atol=ATOL, rtol=0)
    torch.testing.assert_close(
        _stream(vae, z, VAEDecodeOptions.fast(), chunks=[sum(CHUNKS)]), per_frame, atol=ATOL, rtol=0
    )


def test_options_with_tiling(vae_fixture):
    vae = copy.deepcopy(vae_fixture.vae)
    z = _latents(vae.config.z_dim, frames=3, h=7, w=3, seed=3)
    tiling = SpatialTiling(tile_latent=4, overlap_latent=1)  # 2 tiles along h
    reference = _stream(vae_fixture.vae, z, None, chunks=[2, 1], tiling=tiling)
    out = _stream(vae, z, VAEDecodeOptions.fast(), chunks=[2, 1], tiling=tiling)
    torch.testing.assert_close(out, reference, atol=ATOL, rtol=0)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("size", [(1, 1), (4, 6), (5, 3)])
def test_subpixel_upsample_equals_nearest_then_conv(size, channels_last):
    torch.manual_seed(0)
    up = vae_layers.Upsample(8, temporal=False)
    y = torch.randn(3, 8, *size)
    opts = VAEDecodeOptions(subpixel_upsample=True, channels_last=channels_last)
    if channels_last:
        y = y.contiguous(memory_format=torch.channels_last)
    expected = up.resample["1"](F.interpolate(y, scale_factor=2.0, mode="nearest"))
    got = up._subpixel(y, opts)
    assert got.shape == expected.shape
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last or size == (1, 1)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_model_default_options_reach_every_decoder(vae_fixture):
    """`vae.decode_options` is what `stream_decoder()` and `decode()` use when the caller passes none."""
    vae = copy.deepcopy(vae_fixture.vae)
    assert vae.stream_decoder().options is None
    vae.decode_options = VAEDecodeOptions(channels_last=True)
    assert vae.stream_decoder().options == vae.decode_options
    assert vae.stream_decoder(options=VAEDecodeOptions()).options == VAEDecodeOptions()
    layouts: list[bool] = []
    vae.decoder.register_forward_pre_hook(
        lambda _m, args: layouts.append(args[0].is_contiguous(memory_format=torch.channels_last_3d))
    )
    z, reference = _reference(vae_fixture)
    out = vae.decode(z, latent_frames_per_step=None)
    assert layouts == [True]  # the option's route, not the reference
    torch.testing.assert_close(out, reference, atol=ATOL, rtol=0)


def test_latent_statistics_stay_fp32_in_bf16_model(vae_fixture):
    vae = copy.deepcopy(vae_fixture.vae).to(torch.bfloat16)
    assert vae.latent_mean.dtype == torch.float32 and vae.latent_std.dtype == torch.float32
    z = _latents(vae.config.z_dim, frames=2)
    torch.testing.assert_close(vae.denormalise(z), vae_fixture.vae.denormalise(z), atol=0, rtol=0)


@pytest.mark.slow
def test_compiled_option_equals_reference(vae_fixture, monkeypatch):
    """torch.compile (inductor on CPU) of the fused norm + SiLU + padding; dynamic shapes keep compile time short."""
    import torch._dynamo

    monkeypatch.setitem(vae_layers.COMPILE_KWARGS, "dynamic", True)
    monkeypatch.setattr(vae_layers, "_COMPILED", {})
    torch._dynamo.reset()
    vae = copy.deepcopy(vae_fixture.vae)
    z, reference = _reference(vae_fixture)
    out = _stream(vae, z, VAEDecodeOptions(compile=True, channels_last=True))
    # the residual blocks' conv biases are folded into the compiled passes (not added by cuDNN)
    assert {"norm_silu_cat", "add_bias_residual_"} <= set(vae_layers._COMPILED) and not out.isnan().any()
    torch.testing.assert_close(out, reference, atol=ATOL, rtol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("name", [*SINGLE, "all_compiled"])
def test_cuda_bf16_options_agree_with_reference(vae_fixture, name):
    """In bf16 every option stays within bf16 rounding of the reference and is no less accurate vs fp32."""
    options = VAEDecodeOptions.fast(compile=True) if name == "all_compiled" else SINGLE[name]
    z = _latents(vae_fixture.vae.config.z_dim, h=8, w=12, seed=5)
    exact = _stream(vae_fixture.vae, z, None)  # fp32 on CPU
    base = copy.deepcopy(vae_fixture.vae).to("cuda", torch.bfloat16)
    reference = _stream(base, z.cuda(), None).float().cpu()
    vae = copy.deepcopy(vae_fixture.vae).to("cuda", torch.bfloat16)
    out = _stream(vae, z.cuda(), options)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    out = out.float().cpu()
    # two bf16 computations in different orders: each is about its own bf16 rounding away from fp32, so they
    # differ overall by at most about twice the reference's distance to fp32 (the bound is the case's own scale,
    # not a number: a smaller fixture rounds relatively more; seen 0.030 against the fp32 distance of this one);
    # single pixels may differ by a few bf16 steps, so the per-pixel bounds are against fp32 below
    own = (reference - exact).norm()
    assert own > 0 and (out - reference).norm() <= 2.5 * own, ((out - reference).norm(), own)
    err, ref_err = (out - exact).abs(), (reference - exact).abs()
    assert err.mean() <= 1.5 * ref_err.mean() + 1e-3, (err.mean(), ref_err.mean())
    assert err.max() <= 2 * ref_err.max() + 1e-2, (err.max(), ref_err.max())


def test_bench_vae_speed_smoke(tmp_path):
    """The GPU benchmark's protocol runs end to end on CPU (small model, no compile) and writes its JSON."""
    root = Path(__file__).parents[2]
    out = tmp_path / "speed.json"
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "bench_vae_speed.py"),
            "--device",
            "cpu",
            "--small",
            "--variants",
            "channels_last,fused_cache,all_eager",
            "--json",
            str(out),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["results"]]
    assert names == ["baseline", "channels_last", "fused_cache", "all_eager"]
    assert data["meta"]["steady_block_macs"] > data["meta"]["steady_macs_conv3d_k3x3x3"] > 0
    for r in data["results"]:
        assert r["finite"] and r["median_block_ms"] > 0 and r["measured_blocks"] == 2
        assert r["frames_per_block"] == 12 and r["max_abs_diff_vs_baseline"] < 1e-3
    assert "fastest:" in proc.stdout
