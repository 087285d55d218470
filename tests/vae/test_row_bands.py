"""Row-band decode of the Wan VAE's high-resolution stages (vae/row_bands.py) equals the whole-frame decode.

Random weights (not the identity-ish init) and random latents, streamed over blocks so the causal caches
carry band-wise from block to block: float64 on the CPU within 1e-10, float32 within 1e-5, on the reference
path and with the fused/sub-pixel/channels-last options, for 2, 3 (an uneven split) and 4 bands, whole
blocks and one latent frame per call, the previous state kept or released. A halo one row short must fail.
"""

from __future__ import annotations

import copy

import pytest
import torch

from inferix_core.profiling.live_bytes import LiveBytes
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions
from inferix_core.vae.layers import CausalConv3d, CausalConvCache
from inferix_core.vae.memory import DecodeSlicing, VAEMemory
from inferix_core.vae.row_bands import band_cores, cache_scales, receptive_halo, run_in_row_bands

LATENT_H, LATENT_W, CHUNKS = 8, 3, (1, 2, 2)  # the banded stages see 32 rows; their halo is 10
FAST = VAEDecodeOptions(channels_last=True, fused_cache=True, subpixel_upsample=True)


def _vae(dtype: torch.dtype) -> WanVAE:
    torch.manual_seed(0)
    vae = WanVAE(WanVAEConfig(dim=2)).to(dtype).eval()
    with torch.no_grad():
        for p in vae.parameters():
            p.normal_(0.0, 0.5)
    return vae


@pytest.fixture(scope="module")
def vae64() -> WanVAE:
    return _vae(torch.float64)


def _latents(dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 16, sum(CHUNKS), LATENT_H, LATENT_W, generator=g).to(dtype)


def _stream(vae: WanVAE, z: torch.Tensor, **kwargs) -> torch.Tensor:
    dec = vae.stream_decoder(**kwargs)
    outs, start = [], 0
    for n in CHUNKS:
        outs.append(dec.decode(z[:, :, start : start + n]))
        start += n
    return torch.cat(outs, dim=2)


def test_the_halo_covers_the_banded_stages_receptive_field(vae64):
    d = vae64.decoder
    layers = [*d.upsamples[d.band_from :], d.head]
    # 4× stage: 3 residual blocks (6 convs) → 6 rows; the 2× upsample: 2·6 + 1 = 13 at 8×; 8× stage: 6
    # convs + the head's: 20 rows at 8× = 10 rows of the banded stages' input.
    assert receptive_halo(layers) == (10, 2)
    assert set(cache_scales(layers).values()) == {1, 2}
    assert band_cores(32, 3) == [(0, 11), (11, 21), (21, 32)]  # uneven split
    assert d.band_from == 8  # the last two stages: after the second-to-last upsample


@pytest.mark.parametrize("options", ["reference", "fast"])
@pytest.mark.parametrize("bands", [2, 3, 4])
def test_row_bands_equal_the_whole_frame_decode_in_float64(vae64, options, bands):
    opts = None if options == "reference" else FAST
    z = _latents(torch.float64)
    whole = _stream(vae64, z, options=opts)
    assert whole.isfinite().all() and whole.std() > 0.1  # random weights: far from a trivial output
    for step, release in ((None, False), (1, True)):
        banded = _stream(
            vae64, z, options=opts, row_bands=bands, latent_frames_per_step=step, release_previous_state=release
        )
        assert banded.shape == whole.shape
        assert (banded - whole).abs().max() <= 1e-10, (bands, step, release)


def test_row_bands_equal_the_whole_frame_decode_in_float32():
    vae = _vae(torch.float32)
    z = _latents(torch.float32, seed=2)
    whole = _stream(vae, z, options=FAST)
    banded = _stream(vae, z, options=FAST, row_bands=3, latent_frames_per_step=1, release_previous_state=True)
    torch.testing.assert_close(banded, whole, atol=1e-5, rtol=0)


def _suffix_twice(vae: WanVAE, bands: int, halo: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The banded stages on two random inputs in a row (the second call reads the first's caches), whole
    (bands = 1) or in row bands."""
    d = vae.decoder
    layers = [*d.upsamples[d.band_from :], d.head]
    channels = next(m for m in layers[0].modules() if isinstance(m, CausalConv3d)).in_channels
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, channels, 2, 32, 5, generator=g, dtype=torch.float64) for _ in range(2)]
    cache, outs = CausalConvCache(), []
    with torch.no_grad():
        for x in xs:
            if bands == 1:
                for layer in layers:
                    x = layer(x, cache, None)
                outs.append(x)
            else:
                outs.append(run_in_row_bands(layers, x, cache, None, bands, halo))
    return outs[0], outs[1]


def test_a_halo_one_row_short_changes_the_frames(vae64):
    """Random inputs straight into the banded stages. An error starts at a band edge and shrinks with every
    row it travels (here ~1e-8 after the 20 rows of the receptive field; through the full decoder's weights
    it fades to ~1e-17, below any tolerance), so the short halo is caught here, above the 1e-10 of the decode
    tests and far above the exact bands' rounding."""
    d = vae64.decoder
    halo, _ = receptive_halo([*d.upsamples[d.band_from :], d.head])
    whole = _suffix_twice(vae64, 1, None)
    exact = _suffix_twice(vae64, 3, None)
    short = _suffix_twice(vae64, 3, halo - 1)
    for w, e, s in zip(whole, exact, short, strict=True):
        assert (e - w).abs().max() <= 1e-12
        assert (s - w).abs().max() > 1e-9


def test_released_bands_update_owned_entries_in_place_and_never_a_fork(vae64):
    """In place only where the cache alone holds an entry: a forked state (branching) decodes unchanged."""
    z = _latents(torch.float64)
    kwargs = {"row_bands": 2, "latent_frames_per_step": 1, "release_previous_state": True}
    dec = vae64.stream_decoder(**kwargs)
    d = vae64.decoder
    key = d.head[2].cache_key
    dec.decode(z[:, :, :1])
    dec.decode(z[:, :, 1:3])
    entry = dec.state.caches[(0, 0)].frames[key]
    fork = copy.copy(dec)
    fork.state = dec.state.fork()
    a = dec.decode(z[:, :, 3:5])
    assert dec.state.caches[(0, 0)].frames[key] is not entry  # shared with the fork: a new entry
    b = fork.decode(z[:, :, 3:5])
    assert (a - b).abs().max() == 0
    owned = dec.state.caches[(0, 0)].frames[key]
    dec.decode(z[:, :, 3:5])
    assert dec.state.caches[(0, 0)].frames[key] is owned  # ours alone now: written in place
    whole = _stream(vae64, z)
    torch.testing.assert_close(torch.cat([_stream_part(vae64, z), a], dim=2), whole, atol=1e-10, rtol=0)


def _stream_part(vae: WanVAE, z: torch.Tensor) -> torch.Tensor:
    dec = vae.stream_decoder()
    return torch.cat([dec.decode(z[:, :, :1]), dec.decode(z[:, :, 1:3])], dim=2)


@pytest.mark.cuda
@pytest.mark.parametrize("options", ["reference", "fast"])
def test_row_bands_on_cuda_equal_the_whole_frame_decode(options):
    """cuDNN's convs on band-sized inputs (float64: exact to rounding) and the in-place write-back on the GPU."""
    vae = _vae(torch.float64).cuda()
    opts = None if options == "reference" else VAEDecodeOptions.fast()
    z = _latents(torch.float64).cuda()
    whole = _stream(vae, z, options=opts)
    banded = _stream(vae, z, options=opts, row_bands=3, latent_frames_per_step=1, release_previous_state=True)
    assert (banded - whole).abs().max().item() <= 1e-10


@pytest.mark.slow  # 6 counted decodes of 2 blocks: ~25 s per option set on 2 busy cores
@pytest.mark.parametrize("options", ["reference", "fast"])
def test_banded_working_set_is_the_formula(options):
    """The planner's banded decode term against `LiveBytes` counting the real decode (a later block, the
    state it keeps included) within the 10 % of tests/vae/test_decode_slicing.py, at a size where the bands
    are much smaller than the frame (64 rows of the banded stages, halo 10)."""
    torch.manual_seed(0)
    vae = WanVAE(WanVAEConfig(dim=8)).eval()
    vae.decode_options = None if options == "reference" else VAEDecodeOptions.fast()
    h, w, block = 16, 5, 3
    z = torch.randn(1, 16, block, h, w, generator=torch.Generator().manual_seed(4))
    model = VAEMemory.for_vae(vae, h, w)
    unbanded = model.decode(block, DecodeSlicing(1, release_previous_state=True)).transient_bytes
    for bands in (2, 4, 8):
        slicing = DecodeSlicing(1, release_previous_state=True, row_bands=bands)
        dec = vae.stream_decoder(latent_frames_per_step=1, release_previous_state=True, row_bands=bands)
        with LiveBytes() as live:
            for _ in range(2):
                live.reset_peak()
                out = dec.decode(z)
                del out
            kept = live.current
        planned = model.decode(block, slicing)
        assert planned.state_bytes == kept == dec.state.nbytes()
        assert abs(planned.working_set_bytes - live.peak.bytes) <= 0.10 * live.peak.bytes, (bands, live.peak)
    # at this small frame 2 bands (φ = 0.66) may hold more than none; 8 (φ = 0.44) hold less
    assert planned.transient_bytes < unbanded
