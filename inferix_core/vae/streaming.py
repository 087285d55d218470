"""Streaming VAE sessions: decode latent blocks as the pipeline emits them, encode frames as they arrive.

A session owns a `DecodeState` (the causal-conv caches plus counters) and advances it on every call,
so the concatenated outputs equal one full decode for any chunking. The state is a plain object the
caller may read, copy and restore (e.g. to re-decode a block). Optional spatial tiling trades a small,
documented seam error for bounded memory. Nothing here changes model weights or knows about sinks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from ..errors import ConfigError, ShapeMismatchError
from .config import Wan22VAEConfig, WanVAEConfig
from .layers import CausalConvCache
from .options import VAEDecodeOptions

logger = logging.getLogger(__name__)


class CausalVAE(Protocol):
    """What a session needs of a VAE (`WanVAE`, `Wan22VAE`): its config and one causal step each way."""

    config: WanVAEConfig | Wan22VAEConfig

    def prepare_decode(self, options: VAEDecodeOptions) -> None: ...

    def decode_step(
        self,
        z: Tensor,
        cache: CausalConvCache,
        latent_frames_per_step: int | None = None,
        options: VAEDecodeOptions | None = None,
        in_place: bool = False,
        row_bands: int = 1,
    ) -> tuple[Tensor, CausalConvCache]: ...

    def encode_step(self, video: Tensor, cache: CausalConvCache) -> tuple[Tensor, CausalConvCache]: ...


@dataclass
class DecodeState:
    """Everything a streaming decode carries from one block to the next.

    Attributes:
        caches: one `CausalConvCache` per spatial tile ((0, 0) only when not tiling).
        latent_frames_in: latent frames decoded so far.
        frames_out: pixel frames returned so far (after any dropped warm-up frames).
        frames_to_drop: warm-up frames still to discard (the demo mode drops 3).
    """

    caches: dict[tuple[int, int], CausalConvCache] = field(default_factory=dict)
    latent_frames_in: int = 0
    frames_out: int = 0
    frames_to_drop: int = 0

    def fork(self) -> DecodeState:
        return DecodeState(
            {k: c.fork() for k, c in self.caches.items()}, self.latent_frames_in, self.frames_out, self.frames_to_drop
        )

    def nbytes(self) -> int:
        """Memory held by the caches: 3.5 GiB in fp32 (1.8 GiB in bf16) for the real VAE at 480x832.

        Mostly the last two input frames of the full-resolution convs; tiling splits it across tiles but
        does not shrink the total, it only bounds the activations of one call.
        """
        return sum(c.nbytes() for c in self.caches.values())


@dataclass(frozen=True)
class SpatialTiling:
    """Decode in overlapping latent tiles, each with its own caches, blended linearly across the overlap.

    Exactness: the decoder's receptive field spans dozens of 3x3 convs and its per-frame attention is
    global over a frame, so a tile sees cropped context and the blend differs from the untiled decode.
    Measured on random tiny weights (tests/vae/test_streaming.py): mean |diff| ≈ 0.3 × the decode's std
    with 6-latent tiles and 2 of overlap; with attention removed, 0.20 / 0.07 / 0.05 × std for overlaps of
    4 / 8 / 12 latents. Trained weights are smoother, but use tiling only when memory demands it. Tiled
    streaming still equals tiled full decoding, chunk for chunk (to 1e-5).
    """

    tile_latent: int = 32  # tile edge in latent pixels (256 px)
    overlap_latent: int = 8  # overlap in latent pixels (64 px) blended linearly

    def __post_init__(self) -> None:
        if not 0 <= self.overlap_latent < self.tile_latent:
            raise ConfigError(f"overlap_latent={self.overlap_latent} must be in [0, tile_latent={self.tile_latent})")

    def starts(self, size: int) -> list[int]:
        """Tile origins along one axis; the last tile is aligned to the far edge."""
        if size <= self.tile_latent:
            return [0]
        stride = self.tile_latent - self.overlap_latent
        starts = list(range(0, size - self.tile_latent, stride))
        return [*starts, size - self.tile_latent]


def _ramp(length: int, start: int, end: int, size: int, overlap: int, scale: int) -> Tensor:
    """1-D blend weight over a tile of `length` pixels: linear ramps at edges shared with another tile."""
    w = torch.ones(length)
    ramp_px = min(overlap * scale, length)
    if ramp_px == 0:
        return w
    ramp = (torch.arange(ramp_px, dtype=torch.float32) + 0.5) / ramp_px
    if start > 0:
        w[:ramp_px] = ramp
    if end < size:
        w[-ramp_px:] = torch.minimum(w[-ramp_px:], ramp.flip(0))
    return w


class StreamDecoder:
    """Decode latent blocks one after another; `torch.cat(outputs, dim=2)` equals `vae.decode(all_latents)`.

    Args:
        vae: a `WanVAE`.
        latent_frames_per_step: decode each block in slices of this many latent frames (memory bound).
        tiling: optional `SpatialTiling`.
        zero_cache_demo: reproduce the realtime demo's block decoder instead (caches start as zeros so
            frame 0 is doubled too, the first 3 frames are dropped, output clamped to [-1, 1]). It does
            NOT equal the full decode; it exists to compare against the demo.
        krea_decoder: reproduce Krea Realtime's block decoder instead (krea-ai/realtime-video
            demo_utils/vae_block3.py `VAEDecoderWrapper`): one latent frame per decoder call, the upsample
            history of `CausalConvCache.krea_upsample_history`, output clamped to [-1, 1]. Equal to the
            full decode for the first 3 latent frames only; used where Krea's pixels feed back into
            generation (their `keep_first_frame=False`, vae/pixel_window.py).
        options: `VAEDecodeOptions` (speed routes to the same frames); None is the reference path.
            With `channels_last`, the VAE's decoder weights are converted once, here.
        release_previous_state: advance the state in place, freeing each old cache entry as soon as its
            replacement exists (one state's bytes less at the peak; `vae.memory`). The frames are the same;
            a decode that fails then leaves the state half advanced, so it is reset (and the error raised).
        row_bands: decode each call's high-resolution stages in this many row bands with a halo
            (vae/row_bands.py): the same frames, a fraction of the full-resolution activations at once.
    """

    def __init__(
        self,
        vae: CausalVAE,
        *,
        latent_frames_per_step: int | None = None,
        tiling: SpatialTiling | None = None,
        zero_cache_demo: bool = False,
        options: VAEDecodeOptions | None = None,
        krea_decoder: bool = False,
        release_previous_state: bool = False,
        row_bands: int = 1,
    ) -> None:
        if krea_decoder and zero_cache_demo:
            raise ConfigError("krea_decoder and zero_cache_demo are two different decoders; pick one")
        self.vae = vae
        self.krea_decoder = krea_decoder
        self.release_previous_state = release_previous_state
        if row_bands < 1:
            raise ConfigError(f"row_bands={row_bands} must be at least 1 (1 = whole frames)")
        self.row_bands = row_bands
        self.latent_frames_per_step = 1 if krea_decoder else latent_frames_per_step
        self.tiling = tiling
        self.zero_cache_demo = zero_cache_demo
        self.options = options
        if options is not None:
            vae.prepare_decode(options)
        self.state = self.initial_state()

    def initial_state(self) -> DecodeState:
        drop = self.vae.config.temporal_compression - 1 if self.zero_cache_demo else 0
        return DecodeState(frames_to_drop=drop)

    def reset(self) -> None:
        self.state = self.initial_state()

    def _new_cache(self) -> CausalConvCache:
        return CausalConvCache(first_frame_bypass=not self.zero_cache_demo, krea_upsample_history=self.krea_decoder)

    @torch.no_grad()
    def decode(self, latents: Tensor) -> Tensor:
        """Decode the next block of normalised latents (B, z_dim, f, h, w) → new pixel frames (B, 3, T, 8h, 8w)."""
        if latents.ndim != 5:
            raise ShapeMismatchError(f"latents must be [B, C, f, h, w], got {list(latents.shape)}")
        if self.release_previous_state:
            state = self.state
            try:
                pixels = self._decode_into(latents, state)
            except BaseException:
                logger.warning("decode failed with the state advanced in place: the stream decoder starts over")
                self.reset()
                raise
        else:
            state = self.state.fork()
            pixels = self._decode_into(latents, state)
        if self.zero_cache_demo or self.krea_decoder:
            pixels = pixels.clamp(-1.0, 1.0)
        if state.frames_to_drop:
            dropped = min(state.frames_to_drop, pixels.shape[2])
            pixels, state.frames_to_drop = pixels[:, :, dropped:], state.frames_to_drop - dropped
        state.latent_frames_in += latents.shape[2]
        state.frames_out += pixels.shape[2]
        self.state = state
        return pixels

    def _decode_into(self, latents: Tensor, state: DecodeState) -> Tensor:
        if self.tiling is not None:
            return self._decode_tiled(latents, state)
        cache = state.caches.get((0, 0)) or self._new_cache()
        pixels, state.caches[(0, 0)] = self.vae.decode_step(
            latents, cache, self.latent_frames_per_step, self.options, in_place=self.release_previous_state,
            row_bands=self.row_bands,
        )  # fmt: skip
        return pixels

    def _decode_tiled(self, latents: Tensor, state: DecodeState) -> Tensor:
        tiling, scale = self.tiling, self.vae.config.spatial_compression
        h, w = latents.shape[-2:]
        out = weight = None
        for ty in tiling.starts(h):
            for tx in tiling.starts(w):
                y1, x1 = min(ty + tiling.tile_latent, h), min(tx + tiling.tile_latent, w)
                cache = state.caches.get((ty, tx)) or self._new_cache()
                tile, state.caches[(ty, tx)] = self.vae.decode_step(
                    latents[..., ty:y1, tx:x1], cache, self.latent_frames_per_step, self.options,
                    in_place=self.release_previous_state, row_bands=self.row_bands,
                )  # fmt: skip
                wy = _ramp(tile.shape[-2], ty, y1, h, tiling.overlap_latent, scale)
                wx = _ramp(tile.shape[-1], tx, x1, w, tiling.overlap_latent, scale)
                mask = (wy[:, None] * wx[None, :]).to(tile)  # (tile H, tile W)
                if out is None:
                    B, C, T = tile.shape[:3]
                    out = tile.new_zeros(B, C, T, h * scale, w * scale)
                    weight = tile.new_zeros(h * scale, w * scale)
                out[..., ty * scale : y1 * scale, tx * scale : x1 * scale] += tile * mask
                weight[ty * scale : y1 * scale, tx * scale : x1 * scale] += mask
        return out / weight


class StreamEncoder:
    """Encode frames as they arrive; returns normalised latents as soon as whole latent frames exist.

    The causal encoder consumes frame 0 alone and then groups of `temporal_compression` (4) frames, so
    frames that do not yet complete a group wait in a small buffer. `torch.cat` of all outputs equals
    `vae.encode(all_frames)`.
    """

    def __init__(self, vae: CausalVAE) -> None:
        self.vae = vae
        self.cache = CausalConvCache()
        self.pending: Tensor | None = None
        self.frames_in = 0

    @torch.no_grad()
    def encode(self, frames: Tensor) -> Tensor:
        """Feed pixel frames (B, 3, t, H, W) in [-1, 1]; returns (B, z_dim, f, H/8, W/8), f ≥ 0."""
        x = frames if self.pending is None else torch.cat([self.pending, frames], dim=2)
        stride = self.vae.config.temporal_compression
        if self.frames_in == 0:
            take = 1 + (x.shape[2] - 1) // stride * stride if x.shape[2] else 0
        else:
            take = x.shape[2] // stride * stride
        self.pending = x[:, :, take:] if take < x.shape[2] else None
        if take == 0:
            s = self.vae.config.spatial_compression
            return x.new_zeros(x.shape[0], self.vae.config.z_dim, 0, x.shape[-2] // s, x.shape[-1] // s)
        if self.frames_in:
            mu, self.cache = self.vae.encode_step(x[:, :, :take], self.cache)
        else:
            mu, self.cache = self._first(x[:, :, :take])
        self.frames_in += take
        return mu

    def _first(self, x: Tensor) -> tuple[Tensor, CausalConvCache]:
        """Frame 0 goes alone (the causal rule), then the rest of the first call in one step."""
        mu0, cache = self.vae.encode_step(x[:, :, :1], self.cache)
        if x.shape[2] == 1:
            return mu0, cache
        mu, cache = self.vae.encode_step(x[:, :, 1:], cache)
        return torch.cat([mu0, mu], dim=2), cache
