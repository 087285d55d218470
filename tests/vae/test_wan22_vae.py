"""Wan 2.2 VAE parity against tests/fixtures/wan22_vae_*.safetensors (written by bench/fixtures/gen_wan22_vae.py).

Decode, encode and streaming against Wan2.2's own `vae2_2.py`, config inference, the checkpoint layouts
of `Wan2.2_VAE.pth` and ComfyUI's `wan2.2_vae.safetensors`, and the automatic 2.1/2.2 dispatch. Every
size and setting comes from the fixture's `info` metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError, ShapeMismatchError
from inferix_core.vae import WAN22_LATENT_MEAN, WAN22_LATENT_STD, VAEDecodeOptions, Wan22VAE, Wan22VAEConfig, WanVAE
from tests.fixture_utils import files_of_kind

FIXTURE_DIR = Path(__file__).parents[1] / "fixtures"
FIXTURES = files_of_kind("wan22_vae")
ATOL = 1e-4


class Fixture:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tensors = load_file(str(path))
        self.info = json.loads(safe_open(str(path), "pt").metadata()["info"])
        self.vae = WanVAE.from_file(path)  # the generic loader must pick the 2.2 VAE from the weights
        self.decoded = self.vae.decode(
            self.tensors["z"], latent_frames_per_step=self.info["decode"]["latent_frames_per_decoder_call"]
        )


_CACHE: dict[Path, Fixture] = {}


@pytest.fixture(params=FIXTURES, ids=[p.name for p in FIXTURES], scope="module")
def fx(request) -> Fixture:
    if request.param not in _CACHE:
        _CACHE[request.param] = Fixture(request.param)
    return _CACHE[request.param]


def test_fixture_present():
    assert FIXTURES, "no tests/fixtures/wan22_vae*.safetensors; run bench/fixtures/gen_wan22_vae.py"


def test_loader_picks_wan22_and_infers_config(fx):
    expected = fx.info["config"]
    cfg = fx.vae.config
    assert isinstance(fx.vae, Wan22VAE)
    assert (cfg.dim, cfg.dec_dim, cfg.z_dim, cfg.num_res_blocks, cfg.patch_size) == (
        expected["dim"],
        expected["dec_dim"],
        expected["z_dim"],
        expected["num_res_blocks"],
        expected["patch_size"],
    )
    assert list(cfg.dim_mult) == expected["dim_mult"]
    assert list(cfg.temporal_downsample) == expected["temperal_downsample"]
    assert cfg.spatial_compression == fx.info["spatial_compression"]
    assert cfg.temporal_compression == fx.info["temporal_compression"]
    assert cfg.latent_channels == expected["z_dim"]


def test_latent_statistics_are_the_wan22_constants(fx):
    assert torch.equal(fx.tensors["latent_mean"], torch.tensor(WAN22_LATENT_MEAN, dtype=torch.float32))
    assert torch.equal(fx.tensors["latent_std"], torch.tensor(WAN22_LATENT_STD, dtype=torch.float32))


def test_decode_parity(fx):
    out = fx.decoded
    assert list(out.shape) == fx.info["video_shape"]
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, fx.tensors["decode_output"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("step", ["fixture", "all"])
def test_encode_parity(fx, step):
    chunks = fx.info["encode"]["frame_chunks"]  # [1, 4, 4, ...]
    mu = fx.vae.encode(fx.tensors["encode_input_video"], frames_per_step=chunks[1] if step == "fixture" else None)
    assert list(mu.shape) == fx.info["z_shape"]
    assert torch.isfinite(mu).all()
    torch.testing.assert_close(mu, fx.tensors["encode_output_mu"], atol=ATOL, rtol=0)


def _stream(decoder, z, chunks):
    outs, start = [], 0
    for n in chunks:
        outs.append(decoder.decode(z[:, :, start : start + n]))
        start += n
    return outs


@pytest.mark.parametrize("chunking", ["fixture", "ones", "first_two"])
def test_stream_decode_equals_full_decode(fx, chunking):
    z = fx.tensors["z"]
    F = z.shape[2]
    chunks = {
        "fixture": fx.info["cached_decode"]["latent_chunks"],
        "ones": [1] * F,
        "first_two": [min(2, F), *([1] * (F - 2))],
    }[chunking]
    outs = _stream(fx.vae.stream_decoder(), z, chunks)
    cfg = fx.vae.config
    assert outs[0].shape[2] == cfg.num_frames(chunks[0])
    assert all(o.shape[2] == cfg.temporal_compression * c for o, c in zip(outs[1:], chunks[1:]))
    out = torch.cat(outs, dim=2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, fx.decoded, atol=1e-5, rtol=0)
    torch.testing.assert_close(out, fx.tensors["cached_decode.output"], atol=ATOL, rtol=0)


def test_multi_frame_decoder_calls_equal_frame_by_frame(fx):
    """Whole blocks per decoder call (frame 0 bypass and DupUp3D's first-chunk drop inside one call)."""
    z = fx.tensors["z"]
    whole = fx.vae.decode(z, latent_frames_per_step=None)
    torch.testing.assert_close(whole, fx.decoded, atol=1e-5, rtol=0)
    dec = fx.vae.stream_decoder(latent_frames_per_step=2)
    torch.testing.assert_close(torch.cat(_stream(dec, z, [z.shape[2]]), 2), fx.decoded, atol=1e-5, rtol=0)


def test_stream_encode_equals_encode(fx):
    video = fx.tensors["encode_input_video"]
    enc = fx.vae.stream_encoder()
    outs, start = [], 0
    for n in (2, 3, 5, video.shape[2]):  # arbitrary arrivals; frames wait until a latent frame is whole
        outs.append(enc.encode(video[:, :, start : start + n]))
        start += n
        if start >= video.shape[2]:
            break
    torch.testing.assert_close(torch.cat(outs, 2), fx.tensors["encode_output_mu"], atol=ATOL, rtol=0)


def test_fast_decode_options_equal_reference(fx):
    """channels-last, fused buffers and the sub-pixel upsample reach the same frames (CPU fp32)."""
    vae = WanVAE.from_file(fx.path)
    opts = VAEDecodeOptions(channels_last=True, fused_cache=True, subpixel_upsample=True)
    out = torch.cat(
        _stream(vae.stream_decoder(options=opts), fx.tensors["z"], fx.info["cached_decode"]["latent_chunks"]), 2
    )
    torch.testing.assert_close(out.contiguous(), fx.decoded, atol=1e-5, rtol=0)


def test_bfloat16_decode_runs_close(fx):
    vae = WanVAE.from_file(fx.path, dtype=torch.bfloat16)
    out = vae.decode(fx.tensors["z"][:, :, :2], latent_frames_per_step=None)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    n = fx.vae.config.num_frames(2)
    torch.testing.assert_close(out.float(), fx.decoded[:, :, :n], atol=0.05, rtol=0)


def test_frame_rule_and_shape_errors(fx):
    cfg, info = fx.vae.config, fx.info
    assert cfg.num_frames(info["num_latent_frames"]) == info["video_shape"][2]
    with pytest.raises(ConfigError, match="1 \\+ 4"):
        cfg.num_latent_frames(info["video_shape"][2] + 1)
    with pytest.raises(ShapeMismatchError, match=str(cfg.z_dim)):
        fx.vae.decode(torch.randn(1, cfg.z_dim + 1, 1, 2, 2))


@pytest.mark.parametrize("layout", ["wan22_pth", "comfyui_safetensors_bf16", "first_stage_model_prefix"])
def test_checkpoint_layouts(fx, layout, tmp_path):
    """`Wan2.2_VAE.pth` is a plain state dict of the original keys; ComfyUI's `wan2.2_vae.safetensors`
    holds the same keys (its comfy/ldm/wan/vae2_2.py keeps the module names), usually in bf16/fp16."""
    canonical = {k: v.contiguous() for k, v in fx.vae.state_dict().items()}
    if layout == "wan22_pth":
        path = tmp_path / "Wan2.2_VAE.pth"
        torch.save(canonical, path)
    elif layout == "comfyui_safetensors_bf16":
        path = tmp_path / "wan2.2_vae.safetensors"
        save_file({k: v.to(torch.bfloat16) for k, v in canonical.items()}, str(path))
    else:
        path = tmp_path / "ckpt.safetensors"
        save_file({f"first_stage_model.{k}": v for k, v in canonical.items()}, str(path))
    vae = WanVAE.from_file(path)
    assert isinstance(vae, Wan22VAE) and vae.config == fx.vae.config
    for k, v in vae.state_dict().items():
        want = canonical[k].to(torch.bfloat16).float() if layout.endswith("bf16") else canonical[k]
        assert torch.equal(v, want), k


def test_wan21_weights_still_load_as_wan21():
    for path in files_of_kind("wan_vae"):
        vae = WanVAE.from_file(path)
        assert type(vae) is WanVAE and vae.config.spatial_compression == 8


def test_missing_keys_are_reported(fx, tmp_path):
    sd = dict(fx.vae.state_dict())
    key = next(k for k in sd if ".time_conv." in k and k.startswith("decoder."))
    sd.pop(key)
    path = tmp_path / "broken.safetensors"
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    with pytest.raises(CheckpointLayoutError, match=r"broken\.safetensors.*time_conv"):
        WanVAE.from_file(path)


def test_released_architecture_sizes():
    """The default config is the released Wan2.2_VAE.pth (meta tensors, no memory): its widths and parameter count."""
    with torch.device("meta"):
        model = Wan22VAE(Wan22VAEConfig())
    sd = model.state_dict()
    assert Wan22VAEConfig.from_state_dict(sd) == Wan22VAEConfig()
    assert sd["encoder.conv1.weight"].shape == (160, 12, 3, 3, 3)
    assert sd["decoder.conv1.weight"].shape == (1024, 48, 3, 3, 3)
    assert sd["decoder.head.2.weight"].shape == (12, 256, 3, 3, 3)
    assert Wan22VAEConfig().spatial_compression == 16 and Wan22VAEConfig().latent_channels == 48
    assert sum(v.numel() for v in sd.values()) == 704_688_668  # 2.82 GB in fp32, the size of Wan2.2_VAE.pth


@pytest.mark.cuda
def test_cuda_bf16_fast_decode_agrees_with_fp32(fx):
    """On the GPU in bf16 with `VAEDecodeOptions.fast()` (what the registry uses on CUDA): close to the fp32 decode."""
    vae = WanVAE.from_file(fx.path, device="cuda", dtype=torch.bfloat16)
    chunks = fx.info["cached_decode"]["latent_chunks"]
    out = torch.cat(_stream(vae.stream_decoder(options=VAEDecodeOptions.fast()), fx.tensors["z"].cuda(), chunks), 2)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    out = out.float().cpu()
    assert ((out - fx.decoded).norm() / fx.decoded.norm()).item() < 5e-2
