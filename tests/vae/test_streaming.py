"""Streaming VAE sessions: any chunking equals the full decode; the demo's zero-cache mode; tiling; streaming encode."""

from __future__ import annotations

import pytest
import torch

from inferix_core.vae import SpatialTiling, WanVAE, WanVAEConfig

STREAM_ATOL = 1e-5


def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


def _stream(decoder, z: torch.Tensor, chunks: list[int]) -> list[torch.Tensor]:
    outs, start = [], 0
    for n in chunks:
        outs.append(decoder.decode(z[:, :, start : start + n]))
        start += n
    return outs


@pytest.mark.parametrize("chunking", ["fixture", 1, 2, 3])
def test_stream_decode_equals_full_decode(vae_fixture, chunking):
    z = vae_fixture.tensors["z"]
    F = z.shape[2]
    chunks = vae_fixture.info["cached_decode"]["latent_chunks"] if chunking == "fixture" else _chunks(F, chunking)
    outs = _stream(vae_fixture.vae.stream_decoder(), z, chunks)
    cfg = vae_fixture.vae.config
    assert next(o.shape[2] for o in outs) == cfg.num_frames(chunks[0])  # first block: 1 + 4·(c − 1)
    assert all(o.shape[2] == cfg.temporal_compression * c for o, c in zip(outs[1:], chunks[1:]))
    out = torch.cat(outs, dim=2)
    assert not out.isnan().any()
    torch.testing.assert_close(out, vae_fixture.decoded, atol=STREAM_ATOL, rtol=0)
    torch.testing.assert_close(out, vae_fixture.tensors["decode_output"], atol=1e-4, rtol=0)


def test_stream_state_can_be_restored(vae_fixture):
    """The state is an explicit object: decoding a block from a saved state twice gives the same frames."""
    z = vae_fixture.tensors["z"]
    dec = vae_fixture.vae.stream_decoder()
    dec.decode(z[:, :, :1])
    saved = dec.state.fork()
    first = dec.decode(z[:, :, 1:2])
    assert dec.state.latent_frames_in == 2 and saved.latent_frames_in == 1
    dec.state = saved
    torch.testing.assert_close(dec.decode(z[:, :, 1:2]), first, atol=0, rtol=0)
    assert saved.nbytes() > 0


def test_random_latents_stream_in_uneven_blocks(vae_fixture):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, vae_fixture.vae.config.z_dim, 4, 2, 3, generator=g)
    full = vae_fixture.vae.decode(z, latent_frames_per_step=None)
    out = torch.cat(_stream(vae_fixture.vae.stream_decoder(latent_frames_per_step=2), z, [3, 1]), dim=2)
    assert full.shape[2] == 13 and not full.isnan().any()
    torch.testing.assert_close(out, full, atol=STREAM_ATOL, rtol=0)


def test_zero_cache_demo_mode_matches_fixture(vae_fixture):
    settings = vae_fixture.info["stream_block3_zero_cache"]
    assert settings["cache_init"] == "zeros" and settings["output_layout"] == "BCTHW"
    dec = vae_fixture.vae.stream_decoder(
        zero_cache_demo=True, latent_frames_per_step=settings["latent_frames_per_decoder_call"]
    )
    outs = _stream(dec, vae_fixture.tensors["z"], settings["latent_chunks"])
    assert [o.shape[2] for o in outs] == settings["output_frames_per_chunk"]
    assert vae_fixture.vae.config.temporal_compression - 1 == settings["drop_first_frames"]
    out = torch.cat(outs, dim=2)
    lo, hi = settings["clamp"]
    assert out.min() >= lo and out.max() <= hi
    torch.testing.assert_close(out, vae_fixture.tensors["stream_block3_zero_cache.output"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("chunking", ["fixture", 3, "uneven"])
def test_stream_encoder_equals_encode(vae_fixture, chunking):
    """Any split of the fixture's video (its length from the file, not assumed) encodes as the whole does."""
    video = vae_fixture.tensors["encode_input_video"]
    T = video.shape[2]
    assert vae_fixture.info["video_shape"][2] == T
    if chunking == "fixture":
        chunks = vae_fixture.info["encode"]["frame_chunks"]
    elif chunking == "uneven":  # 2 frames, then the rest in two unequal parts
        chunks = [c for c in (2, (T - 2) // 3, T - 2 - (T - 2) // 3) if c > 0]
    else:
        chunks = _chunks(T, chunking)
    assert sum(chunks) == T
    enc = vae_fixture.vae.stream_encoder()
    outs, start = [], 0
    for n in chunks:
        outs.append(enc.encode(video[:, :, start : start + n]))
        start += n
    torch.testing.assert_close(torch.cat(outs, dim=2), vae_fixture.tensors["encode_output_mu"], atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def tiled_setup():
    """A tiny random VAE, latents large enough for 2x2 tiles, its full decode and its tiled decode."""
    torch.manual_seed(0)
    vae = WanVAE(WanVAEConfig(dim=4)).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.25 * torch.randn_like(p))
            elif name.endswith("decoder.head.2.weight"):
                p.mul_(0.25)
    z = torch.randn(1, 16, 2, 10, 10)
    tiling = SpatialTiling(tile_latent=6, overlap_latent=2)
    return vae, z, tiling, vae.decode(z, latent_frames_per_step=None), vae.stream_decoder(tiling=tiling).decode(z)


def test_tiled_stream_equals_tiled_full(tiled_setup):
    vae, z, tiling, _, tiled = tiled_setup
    dec = vae.stream_decoder(tiling=tiling)
    streamed = torch.cat(_stream(dec, z, [1, 1]), dim=2)
    assert sorted(dec.state.caches) == [(0, 0), (0, 4), (4, 0), (4, 4)]  # one cache per tile origin
    torch.testing.assert_close(streamed, tiled, atol=STREAM_ATOL, rtol=0)


def test_one_tile_is_exact(tiled_setup):
    vae, z, _, full, _ = tiled_setup
    out = vae.stream_decoder(tiling=SpatialTiling(tile_latent=16, overlap_latent=4)).decode(z)
    torch.testing.assert_close(out, full, atol=STREAM_ATOL, rtol=0)


def test_tiling_error_is_bounded(tiled_setup):
    """Tiles see cropped context (3x3 convs, and per-frame attention that is global over a frame), so tiled
    output differs from the untiled decode. With these random tiny weights the mean |diff| is about a fifth
    of the decode's std; SpatialTiling's docstring records this."""
    _, _, _, full, tiled = tiled_setup
    assert tiled.shape == full.shape and not tiled.isnan().any()
    err = (tiled - full).abs()
    assert err.mean() < 0.4 * full.std()
    assert not torch.allclose(tiled, full, atol=1e-5)  # an approximation, not exact
