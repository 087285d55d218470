"""The decoder's memory when none is loaded: the Wan 2.1 VAE built on the meta device and counted
(`estimated_memory`), the Wan 2.2 VAE's estimate (`estimated_vae_bytes`).

The top of `vae/`: it builds a `WanVAE` to count it, so no module of the package imports it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..memory import Cost, PlanInput
from .config import WAN22_VAE_PARAMETERS, WanVAEConfig
from .memory import VAEMemory, wan_decode_working_set_bytes
from .options import CUDA_STREAM_SLICING, DecodeSlicing, VAEDecodeOptions
from .wan_vae import WanVAE


def estimated_memory(
    latent_h: int,
    latent_w: int,
    batch: int,
    elem_bytes: int,
    dim: int = 96,
    options: VAEDecodeOptions | None = None,
    cuda: bool = True,
    slicing: DecodeSlicing | None = None,
) -> VAEMemory:
    """The Wan 2.1 VAE (16 latent channels) of base width `dim` when none is loaded (built on the meta
    device: nothing is allocated).

    Defaults are what the loader sets: on CUDA `VAEDecodeOptions.fast()` and `CUDA_STREAM_SLICING`, else
    the reference path and whole blocks.
    """
    opts = options if options is not None else (VAEDecodeOptions.fast() if cuda else None)
    slicing = slicing if slicing is not None else (CUDA_STREAM_SLICING if cuda else DecodeSlicing())
    return _meta_memory(latent_h, latent_w, batch, elem_bytes, dim, opts, cuda, slicing)


@functools.lru_cache(maxsize=64)
def _meta_memory(latent_h, latent_w, batch, elem_bytes, dim, options, cuda, slicing) -> VAEMemory:
    """One meta-device build per setting (planners ask many times in a loop); VAEMemory is frozen."""
    dtype = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}[elem_bytes]
    with torch.device("meta"):
        vae = WanVAE(WanVAEConfig(dim=dim)).to(dtype)
    vae.decode_options = options
    vae.stream_slicing = slicing
    return VAEMemory.for_vae(vae, latent_h, latent_w, batch, cuda=cuda)


def estimated_vae_bytes(
    latent_channels: int, latent_h: int, latent_w: int, latent_frames: int, batch: int, elem_bytes: int, dim: int = 96
) -> int:
    """Weights + streaming-decode working set of the Wan 2.2 VAE (48 latent channels) when none is at hand.

    Its decoder's last stage is 256 wide at 8x the latent grid, before the 2x unpatchify, which the 8x
    formula covers with dim 256, for one latent frame per decoder call (how `Wan22VAE` streams; an
    estimate, not calibrated on a GPU). The Wan 2.1 VAE (16 channels) is counted instead: `estimated_memory`.
    """
    if latent_channels != 48:
        est = estimated_memory(latent_h, latent_w, batch, elem_bytes, dim)
        return est.weights_bytes + est.decode(latent_frames).working_set_bytes
    working = wan_decode_working_set_bytes(256, latent_h, latent_w, min(latent_frames, 1), batch, elem_bytes)
    return WAN22_VAE_PARAMETERS * elem_bytes + working


@dataclass(frozen=True)
class DecoderCost:
    """The decoder's cost row for `memory.compose`: per slicing (fastest first), its weights and decode state
    kept, one block decode transient; `option` is the `DecodeMemory` (None for a decoder of one fixed number)."""

    vae: VAEMemory
    slicings: tuple[DecodeSlicing, ...]
    name: str = "decoder"

    def options(self, given: PlanInput) -> Sequence[Cost]:
        if self.vae.fixed_bytes is not None:  # its own estimate: kept for the whole run, nothing to choose
            return [Cost(self.name, self.vae.fixed_bytes, 0, label="the decoder's own estimate", exact=False)]
        rows = []
        for slicing in self.slicings:
            d = self.vae.decode(given.block_frames, slicing)
            label = slicing.describe(given.block_frames)
            rows.append(
                Cost(self.name, self.vae.weights_bytes + d.state_bytes, d.transient_bytes, 0, d, label, True, d.formula)
            )
        return rows
