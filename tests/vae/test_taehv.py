"""TAEHV / TAEW2.1 preview decoder: real key layout, streaming equals full decode, loader fallback."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, MissingFileError
from inferix_core.vae.taehv import TAEHV, MemoryBlock, TAEHVConfig, TemporalGrow, load_preview_decoder

TINY = TAEHVConfig(decoder_channels=(8, 8, 4, 4), encoder_channels=4)


@pytest.fixture(scope="module")
def tiny() -> TAEHV:
    torch.manual_seed(0)
    model = TAEHV(TINY).eval()
    with torch.no_grad():
        for p in model.parameters():  # He-scaled weights and small biases, so activations stay O(1)
            p.copy_(torch.randn_like(p) * ((2.0 / p[0].numel()) ** 0.5 if p.ndim > 1 else 0.1))
        model.decoder[22].weight.mul_(0.02)  # keep most pixels inside the [0, 1] clamp range
        model.decoder[22].bias.add_(0.5)
    return model


def _sequential_decode(model: TAEHV, latents: torch.Tensor) -> torch.Tensor:
    """Naive reference: one frame at a time, depth first, memory = that layer's previous input frame."""
    memory: dict[int, torch.Tensor] = {}
    frames: list[torch.Tensor] = []

    def run(i: int, x: torch.Tensor) -> None:
        if i == len(model.decoder):
            frames.append(x)
            return
        layer = model.decoder[i]
        if isinstance(layer, MemoryBlock):
            past = memory.get(i, torch.zeros_like(x))
            memory[i] = x
            run(i + 1, layer(x, past))
        elif isinstance(layer, TemporalGrow):
            for part in layer.conv(x).chunk(layer.stride, dim=1):
                run(i + 1, part)
        else:
            run(i + 1, layer(x))

    with torch.no_grad():
        for t in range(latents.shape[2]):
            run(0, latents[:, :, t])
    video = torch.stack(frames, dim=2).clamp(0, 1) * 2 - 1  # (B, 3, T, H, W)
    return video[:, :, model.config.frames_to_trim :]


def test_decode_matches_sequential_reference(tiny):
    """Frames in parallel (our implementation) vs one frame at a time; float64 so only semantics can differ."""
    z = torch.randn(1, 16, 4, 3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    model = TAEHV(TINY).double().eval()
    model.load_state_dict(tiny.state_dict())
    out = model.decode(z)
    assert out.shape == (1, 3, 13, 24, 40)  # 1 + 4·(F − 1) frames, 8x spatial
    assert not out.isnan().any() and out.std() > 0 and (out.abs() < 1).float().mean() > 0.5  # mostly unclamped
    torch.testing.assert_close(out, _sequential_decode(model, z), atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunks", [[1, 1, 1, 1], [3, 1], [2, 2]])
def test_stream_decode_equals_full(tiny, chunks):
    z = torch.randn(1, 16, 4, 3, 5, generator=torch.Generator().manual_seed(2))
    dec, outs, start = tiny.stream_decoder(), [], 0
    for n in chunks:
        outs.append(dec.decode(z[:, :, start : start + n]))
        start += n
    assert outs[0].shape[2] == 1 + 4 * (chunks[0] - 1)
    torch.testing.assert_close(torch.cat(outs, dim=2), tiny.decode(z), atol=1e-5, rtol=0)


def test_encode_shape(tiny):
    video = torch.rand(1, 3, 9, 24, 40) * 2 - 1
    assert tiny.encode(video).shape == (1, 16, 3, 3, 5)


def test_real_key_layout():
    """The published taew2_1 layout: decoder indices 1..22, encoder 0..17 (taehv.py's nn.Sequential indices)."""
    sd = TAEHV(TAEHVConfig()).state_dict()
    for key, shape in {
        "decoder.1.weight": (256, 16, 3, 3),
        "decoder.3.conv.0.weight": (256, 512, 3, 3),
        "decoder.3.conv.4.weight": (256, 256, 3, 3),
        "decoder.7.conv.weight": (256, 256, 1, 1),
        "decoder.8.weight": (128, 256, 3, 3),
        "decoder.13.conv.weight": (256, 128, 1, 1),
        "decoder.19.conv.weight": (128, 64, 1, 1),
        "decoder.22.weight": (3, 64, 3, 3),
        "encoder.0.weight": (64, 3, 3, 3),
        "encoder.2.conv.weight": (64, 128, 1, 1),
        "encoder.12.conv.weight": (64, 64, 1, 1),
        "encoder.17.weight": (16, 64, 3, 3),
    }.items():
        assert tuple(sd[key].shape) == shape, key
    assert not any(".skip." in k or k.startswith("decoder.8.bias") for k in sd)
    assert TAEHVConfig.from_state_dict(sd) == TAEHVConfig()


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_file_round_trip_and_stride_patch(tiny, tmp_path, suffix):
    sd = {k: v.clone() for k, v in tiny.state_dict().items()}
    # Older files store a stride-2 grow at decoder.7; the model uses stride 1 there and keeps the last rows.
    sd["decoder.7.conv.weight"] = torch.cat(
        [torch.randn_like(sd["decoder.7.conv.weight"]), sd["decoder.7.conv.weight"]]
    )
    path = tmp_path / f"taew2_1{suffix}"
    if suffix == ".pth":
        torch.save(sd, path)
    else:
        save_file(sd, str(path))
    loaded = TAEHV.from_file(path)
    assert loaded.config == TINY
    for k, v in tiny.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_unknown_layout(tmp_path):
    path = tmp_path / "other.safetensors"
    save_file({"decoder.conv1.weight": torch.randn(2, 2)}, str(path))
    with pytest.raises(CheckpointLayoutError, match=r"other\.safetensors.*decoder\.3\.conv\.0\.weight"):
        TAEHV.from_file(path)


def test_load_preview_decoder_falls_back(tiny, tmp_path, caplog):
    full_vae = torch.nn.Identity()  # stands in for a WanVAE
    with caplog.at_level(logging.INFO, logger="inferix_core.vae.taehv"):
        assert load_preview_decoder(None, full_vae) is full_vae
        assert load_preview_decoder(tmp_path / "taew2_1.safetensors", full_vae) is full_vae
    assert "not found" in caplog.text and "full Wan VAE" in caplog.text
    with pytest.raises(MissingFileError):
        load_preview_decoder(tmp_path / "taew2_1.safetensors")
    path = tmp_path / "present.safetensors"
    save_file(tiny.state_dict(), str(path))
    assert isinstance(load_preview_decoder(path, full_vae), TAEHV)


TINY_W22 = TAEHVConfig(latent_channels=48, patch_size=2, decoder_channels=(8, 8, 4, 4), encoder_channels=4)


def test_taew2_2_layout_is_read_from_weights_and_matches_wan22_sizes(tmp_path):
    """taew2_2 (madebyollin/taehv): the TAEHV layout with 48 latent channels and a 2x2 pixel shuffle."""
    from einops import rearrange

    from inferix_core.vae import Wan22VAEConfig

    torch.manual_seed(0)
    model = TAEHV(TINY_W22).eval()
    path = tmp_path / "taew2_2.safetensors"
    save_file(model.state_dict(), str(path))
    loaded = TAEHV.from_file(path)
    assert loaded.config == TINY_W22
    assert (
        loaded.state_dict()["decoder.22.weight"].shape[0] == 12
        and loaded.state_dict()["encoder.0.weight"].shape[1] == 12
    )
    z = torch.randn(1, 48, 3, 2, 3)
    out = loaded.decode(z)
    w22 = Wan22VAEConfig()
    assert out.shape == (1, 3, w22.num_frames(3), 2 * w22.spatial_compression, 3 * w22.spatial_compression)
    # The unshuffle is torch's pixel_shuffle (channel c·4 + 2i + j → pixel (2h + i, 2w + j)), as upstream.
    x = torch.randn(2, 12, 3, 5)
    assert torch.equal(
        torch.nn.functional.pixel_shuffle(x, 2), rearrange(x, "n (c i j) h w -> n c (h i) (w j)", i=2, j=2)
    )


def test_preview_decoder_for_the_wrong_vae_falls_back_with_a_warning(tiny, tmp_path, caplog):
    """A taew2_1 file next to the Wan 2.2 VAE (48 channels) cannot decode its latents: the full VAE is used, logged."""

    class _VAE(torch.nn.Module):
        class config:  # noqa: N801 - stands in for a Wan22VAEConfig
            z_dim = 48

    full = _VAE()
    path = tmp_path / "taew2_1.safetensors"
    save_file(tiny.state_dict(), str(path))
    with caplog.at_level(logging.WARNING, logger="inferix_core.vae.taehv"):
        assert load_preview_decoder(path, full) is full
    assert "16 latent channels" in caplog.text and "taew2_2" in caplog.text
    w22 = tmp_path / "taew2_2.safetensors"
    save_file(TAEHV(TINY_W22).state_dict(), str(w22))
    assert isinstance(load_preview_decoder(w22, full), TAEHV)
