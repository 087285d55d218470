"""Device memory of a streamed Wan VAE decode: the state kept between blocks and what one block adds.

Counted, not calibrated: `bench/count_decode_memory.py` runs the real decoder on the `meta` device under
`profiling.LiveBytes` (every tensor's storage tracked until freed) and the formula below reproduces its
peaks; the H200's measured peaks agree with the count to 1 % (docs/memory.md, "The Wan VAE decode").
`DecodeSlicing` names the exact ways to make a decode smaller, which the memory planner chooses from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from .layers import CausalConv3d, Upsample
from .options import (
    CUDA_STREAM_SLICING,
    DECODE_SLICINGS,
    NDHWC_COPY_MAX_ROW_BANDS,
    ROW_BANDS,
    DecodeSlicing,
    VAEDecodeOptions,
)
from .row_bands import band_cores, receptive_halo

__all__ = [  # re-exported: they lived here before vae/options.py
    "CUDA_STREAM_SLICING",
    "DECODE_SLICINGS",
    "NDHWC_COPY_MAX_ROW_BANDS",
    "ROW_BANDS",
    "DecodeSlicing",
]


@dataclass(frozen=True)
class BandGeometry:
    """The banded stages of a Wan 2.1 decoder at one latent size (vae/row_bands.py).

    Attributes:
        rows: rows of the banded stages' input (latent rows × its scale: 4 × for the Wan 2.1 decoder).
        halo: input rows each band reads beyond its core, each side.
        input_bytes: the banded stages' whole-frame input for one latent frame (B · C · frames · H · W · e).
        state_bytes: the part of the decode state kept by the banded stages' temporal convs.
    """

    rows: int
    halo: int
    input_bytes: int
    state_bytes: int

    def fraction(self, bands: int) -> float:
        """The tallest band's input rows (core + halos) over all rows: the share of the activations alive."""
        tallest = max(
            min(self.rows, c1 + self.halo) - max(0, c0 - self.halo) for c0, c1 in band_cores(self.rows, bands)
        )
        return tallest / self.rows


@dataclass(frozen=True)
class DecodeMemory:
    """A streamed decode's device bytes: what stays between blocks and what a block adds while it decodes."""

    state_bytes: int  # causal-conv caches kept between blocks
    transient_bytes: int  # extra while a block decodes: previous state, activations, replaced entries, cuDNN copies
    slicing: DecodeSlicing
    formula: str = ""

    @property
    def working_set_bytes(self) -> int:
        return self.state_bytes + self.transient_bytes


def ndhwc_copies(cuda: bool, options: VAEDecodeOptions | None) -> bool:
    """Whether cuDNN copies NCDHW activations to NDHWC around every conv: on CUDA without `channels_last`."""
    return cuda and not (options is not None and options.channels_last)


def wan_decode_memory(
    state_bytes: int,
    unit_bytes: int,
    block_frames: int,
    slicing: DecodeSlicing,
    options: VAEDecodeOptions | None,
    cuda: bool,
    pixel_bytes: int = 0,
    bands: BandGeometry | None = None,
) -> DecodeMemory:
    """The Wan 2.1 VAE's streamed decode memory for a (later) block of `block_frames` latent frames.

    `unit_bytes` U is one latent frame's activation at the last stage: B · C_last · 4 frames · 8h · 8w · e
    (C_last = dim · dim_mult[0]). The peak is in a full-resolution residual block of the last stage, where
    live are: the previous state (S, unless released), the new state (≈ S), and, per latent frame of the
    call, 5 U of activations on the reference path (input, normalised, SiLU, padded conv input, conv
    output) or 4 U with the fused norm/SiLU buffer (`VAEDecodeOptions.fused`). Replacing cache entries
    one at a time (sliced or released) holds an old entry (U/2: 2 frames) beside its replacement, two on
    the reference path. A sliced call also holds the pixels of the block's earlier slices (`pixel_bytes`
    per latent frame: 3 channels × 4 frames × 8h × 8w). On CUDA, convs on NCDHW activations (no `channels_last`) also make cuDNN's NDHWC
    copies of the padded input and the output, (2f + 1/2) U: inferred from the H200's peaks (9.70 GiB
    measured vs 7.82 counted at 3 frames), invisible to a count.

    With row bands (`slicing.row_bands` > 1, `bands` the decoder's geometry) the last two stages run one band
    at a time: their activations, replaced entries and cuDNN copies shrink to the tallest band's share φ
    (`BandGeometry.fraction`), while the banded stages' whole-frame input (f · X), the assembled pixels of
    the call and, per banded cache entry, the old rows the next band's halo reads (S_band · halo / rows) are
    added.
    """
    f = slicing.frames_per_call(block_frames)
    fused = options is not None and options.fused
    per_frame = 4 if fused else 5
    previous = 0 if slicing.release_previous_state else state_bytes
    replaced = (1 if fused else 2) * unit_bytes // 2 if (f < block_frames or slicing.release_previous_state) else 0
    layout = (4 * f + 1) * unit_bytes // 2 if ndhwc_copies(cuda, options) else 0
    earlier = (block_frames - f) * pixel_bytes
    banded = bands is not None and slicing.row_bands > 1
    phi = bands.fraction(slicing.row_bands) if banded else 1.0
    whole = 0
    if banded:
        whole = f * bands.input_bytes + f * pixel_bytes + bands.state_bytes * bands.halo // bands.rows
    transient = previous + int(phi * (per_frame * f * unit_bytes + replaced + layout)) + earlier + whole
    share = f"{phi:.2f}·" if banded else ""
    terms = [
        "previous state S" if previous else "",
        f"{share}{per_frame}·{f}·U activations",
        f"{share}{1 if fused else 2}·U/2 replaced entries" if replaced else "",
        f"{block_frames - f} earlier slices' pixels" if earlier else "",
        f"{share}(2·{f} + 1/2)·U cuDNN NDHWC copies" if layout else "",
        f"{slicing.row_bands} row bands (φ = {phi:.2f}): banded stages' input {f}·X, the call's pixels, "
        f"the next band's halo rows"
        if banded
        else "",
    ]
    formula = (
        f"state S {state_bytes / 2**30:.2f} GiB kept; a block adds " + " + ".join(t for t in terms if t)
        + f" (U = {unit_bytes / 2**20:.0f} MiB)"
    )  # fmt: skip
    return DecodeMemory(state_bytes, transient, slicing, formula)


def decoder_state_bytes(decoder: nn.Module, latent_h: int, latent_w: int, batch: int, elem_bytes: int) -> int:
    """Bytes of the causal caches a Wan 2.1 decoder keeps between calls (exact).

    Every temporal conv keeps its last `history_frames` input frames at its stage's resolution; the
    stages double the resolution after each `Upsample`. 1.76 GiB in bf16 for the released VAE at 480×832.
    """
    scale, total = 1, 0
    for layer in (decoder.conv1, *decoder.middle, *decoder.upsamples, decoder.head):
        for m in layer.modules():
            if isinstance(m, CausalConv3d) and m.history_frames:
                total += m.in_channels * m.history_frames * (latent_h * scale) * (latent_w * scale)
        if isinstance(layer, Upsample):
            scale *= 2
    return batch * total * elem_bytes


def band_geometry(decoder: nn.Module, latent_h: int, latent_w: int, batch: int, elem_bytes: int) -> BandGeometry:
    """Where a Wan 2.1 decoder's row bands start (`Decoder3d.band_from`), at this latent size: exact sizes."""
    layers = list(decoder.upsamples)
    start = decoder.band_from
    scale, frames = 1, 1
    for layer in layers[:start]:
        if isinstance(layer, Upsample):
            scale *= 2
            frames *= 2 if layer.time_conv is not None else 1
    first = next(m for m in layers[start].modules() if isinstance(m, CausalConv3d)) if start < len(layers) else None
    channels = first.in_channels if first is not None else decoder.head[2].in_channels
    halo, _ = receptive_halo([*layers[start:], decoder.head])
    state, s = 0, scale
    for layer in (*layers[start:], decoder.head):
        for m in layer.modules():
            if isinstance(m, CausalConv3d) and m.history_frames:
                state += m.in_channels * m.history_frames * (latent_h * s) * (latent_w * s)
        if isinstance(layer, Upsample):
            s *= 2
    rows = latent_h * scale
    return BandGeometry(
        rows, halo, batch * channels * frames * rows * latent_w * scale * elem_bytes, batch * state * elem_bytes
    )


@dataclass(frozen=True)
class VAEMemory:
    """What the planner needs to know of a decoder at one latent size: its weights, and per slicing its decode.

    A Wan 2.1 VAE (`for_vae`, `vae.cost.estimated_memory`) offers every `DECODE_SLICINGS`; any other decoder (`fixed`) one
    fixed working set, kept for the whole run.
    """

    weights_bytes: int
    state_bytes: int = 0
    unit_bytes: int = 0
    pixel_bytes: int = 0  # one latent frame's decoded pixels (3 × 4 frames × 8h × 8w × e)
    options: VAEDecodeOptions | None = None
    cuda: bool = False
    fixed_bytes: int | None = None  # a decoder the formula does not describe: this much, all the time
    default: DecodeSlicing = field(default_factory=DecodeSlicing)
    bands: BandGeometry | None = None  # the row-banded stages (None: no row bands offered)

    @property
    def slicings(self) -> tuple[DecodeSlicing, ...]:
        """What a planner may choose from, fastest first: the VAE's own slicing and the smaller ones after it
        (never a faster one than the VAE was set to)."""
        if self.fixed_bytes is not None or self.default not in DECODE_SLICINGS:
            return (self.default,)
        offered = DECODE_SLICINGS[DECODE_SLICINGS.index(self.default) :]
        if self.bands is None:
            most = 1
        else:
            most = NDHWC_COPY_MAX_ROW_BANDS if ndhwc_copies(self.cuda, self.options) else max(ROW_BANDS)
        return tuple(s for s in offered if s.row_bands <= most)

    def decode(self, block_frames: int, slicing: DecodeSlicing | None = None) -> DecodeMemory:
        slicing = self.default if slicing is None else slicing
        if self.fixed_bytes is not None:
            return DecodeMemory(self.fixed_bytes, 0, slicing, "the decoder's own estimate")
        return wan_decode_memory(
            self.state_bytes, self.unit_bytes, block_frames, slicing, self.options, self.cuda, self.pixel_bytes,
            self.bands,
        )  # fmt: skip

    @classmethod
    def fixed(cls, total_bytes: int) -> VAEMemory:
        """Weights and working set given as one number (counted as kept for the whole run)."""
        return cls(0, fixed_bytes=total_bytes)

    @classmethod
    def for_vae(cls, vae, latent_h: int, latent_w: int, batch: int = 1, cuda: bool | None = None) -> VAEMemory:
        """A Wan 2.1 `WanVAE` at hand: its weights, its state at this size, its decode options and slicing."""
        p = next(vae.parameters())
        elem = p.element_size()
        cfg = vae.config
        last = cfg.dim * cfg.dim_mult[0]
        per_channel = batch * cfg.temporal_compression * cfg.spatial_compression**2 * latent_h * latent_w * elem
        return cls(
            weights_bytes=sum(q.numel() * q.element_size() for q in vae.parameters()),
            state_bytes=decoder_state_bytes(vae.decoder, latent_h, latent_w, batch, elem),
            unit_bytes=last * per_channel,
            pixel_bytes=3 * per_channel,
            options=None if vae.decode_options is None or vae.decode_options.is_reference else vae.decode_options,
            cuda=p.device.type == "cuda" if cuda is None else cuda,
            default=getattr(vae, "stream_slicing", DecodeSlicing()),
            bands=band_geometry(vae.decoder, latent_h, latent_w, batch, elem)
            if hasattr(vae.decoder, "band_from")
            else None,
        )


def wan_decode_working_set_bytes(
    dim: int, latent_h: int, latent_w: int, latent_frames: int, batch: int, elem_bytes: int
) -> int:
    """The Wan 2.2 VAE's decode working set estimate (not counted or calibrated yet): 8 activations of
    `dim` channels per output pixel and frame, 4 frames per latent frame. The Wan 2.1 VAE is counted
    exactly instead (`wan_decode_memory`)."""
    return 8 * batch * dim * 4 * latent_frames * (8 * latent_h) * (8 * latent_w) * elem_bytes
