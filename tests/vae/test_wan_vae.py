"""Wan VAE parity against tests/fixtures/wan_vae_*.safetensors, config inference and checkpoint layouts.

Every setting comes from the fixture's `info` metadata; the file name is the test id.
"""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError
from inferix_core.vae import WAN21_LATENT_MEAN, WAN21_LATENT_STD, WanVAE, WanVAEConfig
from inferix_core.vae.checkpoint import load_vae_state_dict

ATOL = 1e-4


def test_config_inferred_from_weights(vae_fixture):
    expected = vae_fixture.info["config"]
    cfg = vae_fixture.vae.config
    assert cfg.dim == expected["dim"]
    assert cfg.z_dim == expected["z_dim"]
    assert list(cfg.dim_mult) == expected["dim_mult"]
    assert cfg.num_res_blocks == expected["num_res_blocks"]
    assert list(cfg.attn_scales) == expected["attn_scales"]
    assert list(cfg.temporal_downsample) == expected["temperal_downsample"]


def test_latent_statistics_are_the_wan21_constants(vae_fixture):
    t = vae_fixture.tensors
    assert torch.equal(t["latent_mean"], torch.tensor(WAN21_LATENT_MEAN, dtype=torch.float32))
    assert torch.equal(t["latent_std"], torch.tensor(WAN21_LATENT_STD, dtype=torch.float32))


def test_decode_parity(vae_fixture):
    t, info = vae_fixture.tensors, vae_fixture.info
    out = vae_fixture.decoded
    assert list(out.shape) == info["video_shape"]
    assert not out.isnan().any()
    torch.testing.assert_close(out, t["decode_output"], atol=ATOL, rtol=0)


def test_encode_parity(vae_fixture):
    t, info = vae_fixture.tensors, vae_fixture.info
    chunks = info["encode"]["frame_chunks"]  # [1, 4, 4, ...]: frame 0 alone, then equal steps
    mu = vae_fixture.vae.encode(t["encode_input_video"], frames_per_step=chunks[1])
    assert list(mu.shape) == info["z_shape"]
    assert not mu.isnan().any()
    torch.testing.assert_close(mu, t["encode_output_mu"], atol=ATOL, rtol=0)


def test_bfloat16_decode_runs_close(vae_fixture):
    """Real runs use bf16; the decode must stay finite and close to fp32 (normalisation itself stays fp32).

    "Close" is measured against the same fixture's own sensitivity to bf16: the fp32 decode with only its weights
    rounded to bf16. A bf16 run rounds the weights and, at each conv/norm, the activations too, at the same
    eps, so its error is of the same order: measured 1.7-1.9x the weights-only error (max and RMS) on two tiny
    VAEs whose bf16 errors differ 3x (0.045 and 0.13 of max|ref| 1.4-1.7). The bound, 3x, needs no constant
    per fixture; an fp32 step run in bf16 or a lost fp32 normalisation lands well above it."""
    vae = WanVAE.from_file(vae_fixture.path, dtype=torch.bfloat16)
    z = vae_fixture.tensors["z"][:, :, :2]
    out = vae.decode(z, latent_frames_per_step=None)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    ref = vae_fixture.decoded[:, :, :5]
    rounded = WanVAE.from_file(vae_fixture.path, dtype=torch.float32)
    with torch.no_grad():
        for param in rounded.parameters():
            param.copy_(param.bfloat16().float())
    weights_only = (rounded.decode(z, latent_frames_per_step=None) - ref).abs().max().item()
    assert weights_only > 0  # the rounding reached the output: the bound below is not zero by accident
    torch.testing.assert_close(out.float(), ref, atol=3 * weights_only, rtol=0)


def test_frame_rule(vae_fixture):
    cfg, info = vae_fixture.vae.config, vae_fixture.info
    assert cfg.num_frames(info["num_latent_frames"]) == info["video_shape"][2]
    assert cfg.num_latent_frames(info["video_shape"][2]) == info["num_latent_frames"]
    with pytest.raises(ConfigError, match="1 \\+ 4"):
        cfg.num_latent_frames(info["video_shape"][2] + 1)


def _to_diffusers(sd: dict[str, torch.Tensor], num_res_blocks: int) -> dict[str, torch.Tensor]:
    """Canonical → diffusers AutoencoderKLWan names, written independently of the loader for a round trip."""
    resnet = {
        "residual.0": "norm1",
        "residual.2": "conv1",
        "residual.3": "norm2",
        "residual.6": "conv2",
        "shortcut": "conv_shortcut",
    }
    per_block = num_res_blocks + 2  # decoder: R+1 resnets, then an upsampler
    out = {}
    for key, v in sd.items():
        new = key
        if m := re.match(r"(conv1|conv2)\.(.+)", key):
            new = {"conv1": "quant_conv", "conv2": "post_quant_conv"}[m[1]] + "." + m[2]
        elif m := re.match(r"(en|de)coder\.conv1\.(.+)", key):
            new = f"{m[1]}coder.conv_in.{m[2]}"
        elif m := re.match(r"(en|de)coder\.head\.(0|2)\.(.+)", key):
            new = f"{m[1]}coder.{'norm_out' if m[2] == '0' else 'conv_out'}.{m[3]}"
        elif m := re.match(r"(en|de)coder\.middle\.1\.(.+)", key):
            new = f"{m[1]}coder.mid_block.attentions.0.{m[2]}"
        elif m := re.match(r"(en|de)coder\.middle\.(0|2)\.(residual\.\d|shortcut)\.(.+)", key):
            new = f"{m[1]}coder.mid_block.resnets.{int(m[2]) // 2}.{resnet[m[3]]}.{m[4]}"
        elif m := re.match(r"encoder\.downsamples\.(\d+)\.(residual\.\d|shortcut)\.(.+)", key):
            new = f"encoder.down_blocks.{m[1]}.{resnet[m[2]]}.{m[3]}"
        elif m := re.match(r"encoder\.downsamples\.(.+)", key):
            new = f"encoder.down_blocks.{m[1]}"
        elif m := re.match(r"decoder\.upsamples\.(\d+)\.(residual\.\d|shortcut)\.(.+)", key):
            b, r = divmod(int(m[1]), per_block)
            new = f"decoder.up_blocks.{b}.resnets.{r}.{resnet[m[2]]}.{m[3]}"
        elif m := re.match(r"decoder\.upsamples\.(\d+)\.(.+)", key):
            new = f"decoder.up_blocks.{int(m[1]) // per_block}.upsamplers.0.{m[2]}"
        out[new] = v
    return out


@pytest.mark.parametrize(
    "layout", ["comfyui", "first_stage_model", "vae_prefix", "wan_pth", "wrapped_pth", "diffusers"]
)
def test_checkpoint_layouts_round_trip(vae_fixture, layout, tmp_path):
    canonical = vae_fixture.vae.state_dict()
    if layout == "comfyui":
        path, sd = tmp_path / "wan_2.1_vae.safetensors", canonical
    elif layout == "first_stage_model":
        path, sd = tmp_path / "ckpt.safetensors", {f"first_stage_model.{k}": v for k, v in canonical.items()}
    elif layout == "vae_prefix":
        path, sd = tmp_path / "ckpt.safetensors", {f"vae.{k}": v for k, v in canonical.items()}
    elif layout in ("wan_pth", "wrapped_pth"):
        path, sd = tmp_path / "Wan2.1_VAE.pth", canonical
    else:
        path, sd = (
            tmp_path / "diffusion_pytorch_model.safetensors",
            _to_diffusers(canonical, vae_fixture.vae.config.num_res_blocks),
        )
        assert "decoder.up_blocks.1.resnets.0.conv_shortcut.weight" in sd
    if path.suffix == ".pth":
        torch.save({"state_dict": sd} if layout == "wrapped_pth" else sd, path)
    else:
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    loaded, _ = load_vae_state_dict(path)
    assert set(loaded) == set(canonical)
    vae = WanVAE.from_file(path)
    assert vae.config == vae_fixture.vae.config
    for k, v in vae.state_dict().items():
        assert torch.equal(v, canonical[k]), k


def test_unknown_layout_names_file_and_expectation(tmp_path):
    path = tmp_path / "not_a_vae.safetensors"
    save_file({"foo.weight": torch.randn(2, 2)}, str(path))
    with pytest.raises(CheckpointLayoutError, match=r"not_a_vae\.safetensors.*foo\.weight.*decoder\.conv1\.weight"):
        WanVAE.from_file(path)


def test_missing_keys_are_reported(vae_fixture, tmp_path):
    """A decoder weight missing from the fixture's own state dict (the config is inferred from the encoder's
    keys, so the file still parses) is named in the error, with the file."""
    # contiguous: a decode with channels_last options (another test) may have converted the shared VAE's weights
    sd = {k: v.contiguous() for k, v in vae_fixture.vae.state_dict().items()}
    decoder = sorted(k for k in sd if k.startswith("decoder.") and k.endswith(".weight"))
    temporal = [k for k in decoder if "time_conv" in k]
    for key in {(temporal or decoder)[-1], decoder[len(decoder) // 2]}:
        broken = {k: v for k, v in sd.items() if k != key}
        path = tmp_path / "broken.safetensors"
        save_file(broken, str(path))
        with pytest.raises(CheckpointLayoutError, match=rf"broken\.safetensors.*{re.escape(key)}"):
            WanVAE.from_file(path)


def test_real_wan21_architecture_is_inferred():
    """The default config is Wan 2.1 (dim 96); its key layout round-trips through inference (meta tensors, no memory)."""
    with torch.device("meta"):
        model = WanVAE(WanVAEConfig())
    sd = model.state_dict()
    assert WanVAEConfig.from_state_dict(sd) == WanVAEConfig()
    assert sd["decoder.upsamples.3.time_conv.weight"].shape == (768, 384, 3, 1, 1)
    assert sd["decoder.head.2.weight"].shape == (3, 96, 3, 3, 3)
    assert sum(v.numel() for v in sd.values()) == 126_892_531  # 507.6 MB in fp32, the size of Wan2.1_VAE.pth
