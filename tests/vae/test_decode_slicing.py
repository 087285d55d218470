"""The memory planner's decode slicings give the whole-block frames, and its decode formula matches a count.

Frames: every `DECODE_SLICINGS` entry (one latent frame per call, the previous state released) streamed
over the fixture's own blocks equals the whole-block stream decode to 1e-5 and the fixture's decode to
1e-4, with the reference path and with `VAEDecodeOptions.fast()`. Memory: the formula of
`vae.memory.wan_decode_memory` against `profiling.LiveBytes` counting the real decode on the CPU (state
exact; working set within 10 %), at the fixture's sizes and at a second width and size.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.profiling.live_bytes import LiveBytes
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions
from inferix_core.vae.cost import estimated_memory
from inferix_core.vae.memory import DECODE_SLICINGS, DecodeSlicing, VAEMemory

OPTIONS = {"reference": None, "fast": VAEDecodeOptions.fast()}


def _stream(vae: WanVAE, z: torch.Tensor, chunks: list[int], slicing: DecodeSlicing, options) -> torch.Tensor:
    dec = vae.stream_decoder(
        latent_frames_per_step=slicing.latent_frames_per_step,
        release_previous_state=slicing.release_previous_state,
        row_bands=slicing.row_bands,
        options=options,
    )
    outs, start = [], 0
    for n in chunks:
        outs.append(dec.decode(z[:, :, start : start + n]))
        start += n
    return torch.cat(outs, dim=2)


@pytest.mark.parametrize("options", list(OPTIONS), ids=list(OPTIONS))
def test_every_planned_slicing_equals_the_whole_block_decode(vae_fixture, options):
    vae, z = vae_fixture.vae, vae_fixture.tensors["z"]
    chunks = vae_fixture.info["cached_decode"]["latent_chunks"]
    assert sum(chunks) == z.shape[2] == vae_fixture.info["num_latent_frames"]
    whole = _stream(vae, z, chunks, DecodeSlicing(), OPTIONS[options])
    assert not whole.isnan().any()
    assert any(s.frames_per_call(max(chunks)) < max(chunks) for s in DECODE_SLICINGS)  # a sliced one is tested
    for slicing in DECODE_SLICINGS[1:]:
        out = _stream(vae, z, chunks, slicing, OPTIONS[options])
        torch.testing.assert_close(out, whole, atol=1e-5, rtol=0, msg=f"{slicing}")
    if options == "reference":
        torch.testing.assert_close(whole, vae_fixture.tensors["decode_output"], atol=1e-4, rtol=0)


def test_a_released_state_is_advanced_in_place_and_a_failed_decode_starts_over(vae_fixture, monkeypatch):
    vae, z = vae_fixture.vae, vae_fixture.tensors["z"]
    dec = vae.stream_decoder(release_previous_state=True)
    dec.decode(z[:, :, :1])
    state = dec.state
    dec.decode(z[:, :, 1:2])
    assert dec.state is state and state.latent_frames_in == 2  # no fork: the old entries could be freed

    def fail(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(vae.decoder.head, "forward", fail)  # after every other layer advanced its entries
    with pytest.raises(RuntimeError, match="simulated"):
        dec.decode(z[:, :, 2:3])
    assert dec.state.latent_frames_in == 0 and not dec.state.caches  # half-advanced state dropped, not reused


def _count(vae: WanVAE, h: int, w: int, block: int, slicing: DecodeSlicing) -> tuple[int, int]:
    """(most bytes alive while the second block decodes, state bytes kept after it), counted on the CPU."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, vae.config.z_dim, block, h, w, generator=g)
    dec = vae.stream_decoder(
        latent_frames_per_step=slicing.latent_frames_per_step,
        release_previous_state=slicing.release_previous_state,
        row_bands=slicing.row_bands,
    )
    with LiveBytes() as live:
        for _ in range(2):
            live.reset_peak()
            out = dec.decode(z)
            assert not out.isnan().any()
            del out
        kept = live.current
    assert kept == dec.state.nbytes()  # what stays is the state, nothing else
    return live.peak.bytes, kept


def _sizes(vae_fixture) -> list[tuple[WanVAE, int, int, int]]:
    """The fixture's VAE at its latent size and blocks, and a second width (dim 8) at another size."""
    _, _, _, h, w = vae_fixture.info["z_shape"]
    # At least 4x6 latents: with 2 row bands a 2-row latent gives 1-row bands, where a band's halo rows are as
    # large as the band itself; the formula counts halos as a small addition (true at real sizes, 60x104) and
    # is ~20% off there. The VAE is convolutional, so its weights decode any size.
    h, w = max(h, 4), max(w, 6)
    block = max(vae_fixture.info["cached_decode"]["latent_chunks"])
    torch.manual_seed(0)
    wider = WanVAE(WanVAEConfig(dim=8)).eval()
    return [(vae_fixture.vae, h, w, block), (wider, h + 2, w + 3, 3)]


@pytest.mark.slow  # ~25 decodes under the counting dispatch mode: ~20 s per option set on 2 busy cores
@pytest.mark.parametrize("options", list(OPTIONS), ids=list(OPTIONS))
def test_decode_memory_formula_matches_the_count(vae_fixture, options):
    for vae, h, w, block in _sizes(vae_fixture):
        vae.decode_options = OPTIONS[options]
        try:
            model = VAEMemory.for_vae(vae, h, w)  # on the CPU: no cuDNN layout copies
            for slicing in DECODE_SLICINGS:
                peak, kept = _count(vae, h, w, block, slicing)
                planned = model.decode(block, slicing)
                assert planned.state_bytes == kept, (vae.config.dim, slicing)
                assert abs(planned.working_set_bytes - peak) <= 0.10 * peak, (vae.config.dim, h, w, slicing, peak)
        finally:
            vae.decode_options = None


def test_cuda_adds_the_ncdhw_copies_only_without_channels_last():
    """The cuDNN term (inferred from the H200's peaks) applies on CUDA without channels_last, never on the CPU."""
    whole = DecodeSlicing()  # these peaks are of whole-block decodes (CUDA's default is one latent frame per call)
    ref = estimated_memory(60, 104, 1, 2, options=VAEDecodeOptions(), cuda=True, slicing=whole)
    cpu = estimated_memory(60, 104, 1, 2, options=VAEDecodeOptions(), cuda=False, slicing=whole)
    fast = estimated_memory(60, 104, 1, 2, options=VAEDecodeOptions.fast(), cuda=True, slicing=whole)
    f = 3
    extra = ref.decode(f).working_set_bytes - cpu.decode(f).working_set_bytes
    assert extra == (4 * f + 1) * ref.unit_bytes // 2
    assert "cuDNN" in ref.decode(f).formula and "cuDNN" not in fast.decode(f).formula
    # the H200's peaks (docs/performance.md, bench_vae_speed at 3e632c9): reference 9.70, fast() 6.99 GiB
    GiB = 2**30
    assert abs(ref.decode(f).working_set_bytes / GiB - 9.70) < 0.05 * 9.70
    assert abs(fast.decode(f).working_set_bytes / GiB - 6.99) < 0.05 * 6.99


def test_the_ndhwc_copy_path_offers_at_most_four_row_bands():
    """Where cuDNN copies layouts the H200 measured no gain past 4 bands (the peak leaves the banded stages), so a
    plan never counts on 8 there; `fast()` on CUDA and the CPU keep every rung."""
    bands = {
        name: [s.row_bands for s in estimated_memory(60, 104, 1, 2, options=opts, cuda=cuda).slicings]
        for name, opts, cuda in (
            ("ndhwc", VAEDecodeOptions(), True),
            ("fast", VAEDecodeOptions.fast(), True),
            ("cpu", VAEDecodeOptions(), False),
        )
    }
    assert max(bands["ndhwc"]) == 4 and 2 in bands["ndhwc"]
    assert max(bands["fast"]) == max(bands["cpu"]) == 8


@pytest.mark.cuda
@pytest.mark.parametrize("options", list(OPTIONS), ids=list(OPTIONS))
def test_cuda_working_set_is_the_formula(options):
    """On the GPU (the released VAE's shape, bf16, 480×832, 3-latent blocks): the peak allocated while a later
    block decodes, above what was allocated before the stream, within 10 % of the formula, for every slicing."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        vae = WanVAE(WanVAEConfig(dim=96)).to(torch.bfloat16).eval().requires_grad_(False)
    vae.decode_options = OPTIONS[options]
    h, w, block = 60, 104, 3
    z = torch.randn(1, 16, 2 * block, h, w, device="cuda", dtype=torch.bfloat16)
    model = VAEMemory.for_vae(vae, h, w)
    rows, off = [], []
    for slicing in model.slicings:  # every slicing a planner may choose on this path
        dec = vae.stream_decoder(
            latent_frames_per_step=slicing.latent_frames_per_step,
            release_previous_state=slicing.release_previous_state,
            row_bands=slicing.row_bands,
        )
        dec.decode(z[:, :, :block])  # the first block (fewer frames) and any autotuning
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() - dec.state.nbytes()
        out = dec.decode(z[:, :, block:])
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated() - base
        planned = model.decode(block, slicing).working_set_bytes
        rows.append(
            f"{slicing.describe(block)}: measured {measured / 2**30:.3f} GiB, planned {planned / 2**30:.3f} GiB"
        )
        if abs(measured - planned) > 0.10 * planned:
            off.append(rows[-1])
        del dec, out
        torch.cuda.empty_cache()
    print(f"{options}:", *rows, sep="\n  ")  # every slicing's pair, also when one is off (-s shows them)
    assert not off, (options, off)
