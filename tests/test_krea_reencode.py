"""Krea's keep_first_frame=False around the parity fixture: refusals, Krea's block decoder, the bounded
pixel window, and the API run that shows the very pixels it re-encodes (tiny models, CPU).

Parity with krea-ai/realtime-video itself is `test_family_parity.py` (`krea_*_reencode_*` fixtures).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.api import generate_video, pixels_to_uint8
from inferix_core.errors import ConfigError
from inferix_core.models.registry import get_family
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig
from inferix_core.vae.pixel_window import PixelWindowEncoder
from tests.test_api import tiny_world

KREA_LIKE = SamplingConfig((1000, 0), block_frames=2, kv_recompute_frames=2, keep_first_frame=False)


def test_refusals_name_the_fix():
    assert get_family("krea").sampling.keep_first_frame is False  # their GenerateParams default
    with pytest.raises(ConfigError, match="kv_recompute_frames >= 2 or keep_first_frame=True"):
        SamplingConfig(kv_recompute_frames=1, keep_first_frame=False)
    wm = tiny_world()
    with pytest.raises(ConfigError, match="keep_first_frame=True"):
        BlockDiffusionPipeline(wm.transformer, KREA_LIKE)  # no VAE in the loop: refused, not a silent keep-first
    with pytest.raises(ConfigError, match="only used by"):
        BlockDiffusionPipeline(
            wm.transformer, dataclasses.replace(KREA_LIKE, keep_first_frame=True), None, PixelWindowEncoder(wm.vae, 2)
        )
    no_vae = dataclasses.replace(wm, sampling=KREA_LIKE, vae=None)
    with pytest.raises(ConfigError, match=r"Wan 2\.1 VAE"):
        generate_video(no_vae, "", num_blocks=2, width=48, height=32, decode=False)
    with pytest.raises(ConfigError, match="pick one"):
        wm.vae.stream_decoder(krea_decoder=True, zero_cache_demo=True)


def test_krea_decoder_is_the_full_decode_for_three_latent_frames_then_not():
    """Their upsample3d history ([current, current] after a 1-frame input) first shows in latent frame 3."""
    vae = tiny_world().vae
    z = torch.randn(1, 16, 6, 2, 2, generator=torch.Generator().manual_seed(3))
    full = vae.decode(z).clamp(-1, 1)
    dec = vae.stream_decoder(krea_decoder=True)
    krea = torch.cat([dec.decode(z[:, :, a : a + 3]) for a in (0, 3)], dim=2)
    assert krea.shape == full.shape and torch.isfinite(krea).all() and krea.abs().max() <= 1
    torch.testing.assert_close(krea[:, :, :9], full[:, :, :9], atol=1e-5, rtol=0)  # latent frames 0..2
    assert (krea[:, :, 9:] - full[:, :, 9:]).abs().max() > 1e-3


def test_krea_decoder_with_the_speed_options_decodes_the_same_frames():
    """VAEDecodeOptions (channels-last, fused cache, sub-pixel upsample) take Krea's upsample history along."""
    import copy

    from inferix_core.vae import VAEDecodeOptions

    vae = tiny_world().vae
    z = torch.randn(1, 16, 6, 2, 3, generator=torch.Generator().manual_seed(4))
    ref, fast = (
        vae.stream_decoder(krea_decoder=True),
        copy.deepcopy(vae).stream_decoder(krea_decoder=True, options=VAEDecodeOptions.fast()),
    )
    a = torch.cat([ref.decode(z[:, :, i : i + 3]) for i in (0, 3)], dim=2)
    b = torch.cat([fast.decode(z[:, :, i : i + 3]) for i in (0, 3)], dim=2)
    assert (a - vae.decode(z).clamp(-1, 1)).abs().max() > 1e-3  # Krea's frames, not the full decode's
    torch.testing.assert_close(b.contiguous(), a, atol=1e-5, rtol=0)


def test_pixel_window_is_bounded():
    vae = tiny_world().vae
    window = PixelWindowEncoder(vae, 3)
    for b in range(4):
        window.observe(torch.randn(1, 3, 16, 2, 2, generator=torch.Generator().manual_seed(b)))
        assert len(window.frames) == min(9 + 12 * b, 9)  # 1 + 4(K − 1) frames at most
    latent = window.encode_oldest()
    assert latent.shape == (1, 1, 16, 2, 2) and torch.isfinite(latent).all()
    assert window.nbytes() <= 2 * window.last_pixels.untyped_storage().nbytes()  # the last block or two
    window.reset()
    assert not window.frames and window.last_pixels is None


@pytest.mark.slow  # two runs with a VAE decode of every block: ~20 s on 2 loaded cores
def test_run_reencodes_and_shows_the_pixels_it_reencodes():
    """generate_video: the first context frame is re-encoded from block 2 on (K = 2, 2-frame blocks), the frames
    shown are Krea's decoder's (decoded once, inside the loop), and blocks 0-1 equal a keep-first run."""
    wm = dataclasses.replace(tiny_world(), sampling=KREA_LIKE)
    calls = []
    real = PixelWindowEncoder.encode_oldest

    def spy(self):
        calls.append(len(self.frames))
        return real(self)

    PixelWindowEncoder.encode_oldest = spy
    try:
        res = generate_video(wm, "", num_blocks=4, width=32, height=16, seed=5)
    finally:
        PixelWindowEncoder.encode_oldest = real
    assert calls == [5, 5]  # before blocks 2 and 3, each from a full window of 1 + 4(K − 1) frames
    dec = wm.vae.stream_decoder(krea_decoder=True)
    shown = np.concatenate(
        [pixels_to_uint8(dec.decode(res.latents[:, a : a + 2].permute(0, 2, 1, 3, 4))) for a in (0, 2, 4, 6)]
    )
    np.testing.assert_array_equal(res.frames, shown)
    keep = generate_video(
        dataclasses.replace(wm, sampling=dataclasses.replace(KREA_LIKE, keep_first_frame=True)),
        "", num_blocks=4, width=32, height=16, seed=5, decode=False,
    )  # fmt: skip
    torch.testing.assert_close(res.latents[:, :4], keep.latents[:, :4], atol=0, rtol=0)
    assert (res.latents[:, 4:] - keep.latents[:, 4:]).abs().max() > 1e-4


@pytest.mark.slow  # a VAE decode of every block: ~20 s on 2 loaded cores
def test_session_reencodes_and_shows_the_pixels_it_reencodes():
    """InteractiveSession runs the same re-encode (its own window per session) and shows Krea's decoder's frames;
    blocks 0-1 equal a keep-first session's (per-block noise there, so compared session to session)."""
    from inferix_core.clients.session import InteractiveSession

    wm = dataclasses.replace(tiny_world(), sampling=KREA_LIKE)
    context = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(9))
    calls = []
    real = PixelWindowEncoder.encode_oldest
    PixelWindowEncoder.encode_oldest = lambda self: calls.append(len(self.frames)) or real(self)
    try:
        session = InteractiveSession(wm, context, width=32, height=16, seed=5)
        blocks = [session.step() for _ in range(3)]
    finally:
        PixelWindowEncoder.encode_oldest = real
    assert calls == [5]  # before block 2 only
    latents = torch.cat([b.latents for b in blocks], dim=1)
    dec = wm.vae.stream_decoder(krea_decoder=True)
    shown = [pixels_to_uint8(dec.decode(latents[:, a : a + 2].permute(0, 2, 1, 3, 4))) for a in (0, 2, 4)]
    np.testing.assert_array_equal(np.concatenate([b.frames for b in blocks]), np.concatenate(shown))
    keep = dataclasses.replace(wm, sampling=dataclasses.replace(KREA_LIKE, keep_first_frame=True))
    kept = InteractiveSession(keep, context, width=32, height=16, seed=5, decode=False)
    kept = torch.cat([kept.step().latents for _ in range(3)], dim=1)
    torch.testing.assert_close(latents[:, :4], kept[:, :4], atol=0, rtol=0)
    assert (latents[:, 4:] - kept[:, 4:]).abs().max() > 1e-4
