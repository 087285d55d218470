"""Krea Realtime's re-encoded first context frame (their server default `keep_first_frame=False`).

krea-ai/realtime-video @ acf4b7b `release_server.py`: every block is decoded as it is generated and its
pixel frames go into `frame_context_cache = deque(maxlen=1 + (kv_cache_num_frames - 1) * 4)` (lines
388-389, 721); once the KV window has rolled past the first latent frame, `get_clean_context_frames`
(lines 563-576) replaces that frame by `encode_video_latent` of the oldest pixel frame still in the deque,
alone, with a fresh encoder cache (`[None] * 55`). `PixelWindowEncoder` is that deque and that encode,
on our Wan VAE; the pipeline reaches it through its `FirstFrameEncoder` Protocol.

Their decode is their own block decoder (`StreamDecoder(krea_decoder=True)`: one latent frame per call,
clamped to [-1, 1]); the pixels the run shows can be the same ones (`last_pixels`), so nothing is decoded
twice. Their encode bicubic-resizes the frame to a hard-coded 480x832 first, which is the identity at
their (only working) size; here the frame is encoded at the run's size. They cast the frame and the VAE
to fp16; here both stay in the VAE's dtype.
"""

from __future__ import annotations

import copy
from collections import deque

import torch
from torch import Tensor

from ..errors import ConfigError, ShapeMismatchError
from .wan_vae import WanVAE


class PixelWindowEncoder:
    """Decode each clean block, keep the newest 1 + 4·(K − 1) pixel frames, encode the oldest on demand.

    Args:
        vae: the run's Wan 2.1 VAE (encoder and decoder).
        context_frames: K, the KV recompute's clean context frames (`SamplingConfig.kv_recompute_frames`).
    """

    def __init__(self, vae: WanVAE, context_frames: int) -> None:
        if vae is None or not hasattr(vae, "encoder") or getattr(vae.config, "z_dim", None) != 16:
            raise ConfigError(
                "Krea's keep_first_frame=False re-encodes decoded frames with the Wan 2.1 VAE inside the loop: pick "
                "that VAE in Inferix Load World Model (--vae), or set keep_first_frame=True (SamplingConfig) to keep "
                "the first latent frame instead"
            )
        if context_frames < 1:
            raise ConfigError(f"context_frames must be >= 1, got {context_frames}")
        self.vae = vae
        self.max_frames = 1 + (context_frames - 1) * vae.config.temporal_compression
        self.reset()

    def reset(self) -> None:
        """Forget the stream: a fresh decoder cache and an empty pixel window."""
        self.decoder = self.vae.stream_decoder(krea_decoder=True)
        self.frames: deque[Tensor] = deque(maxlen=self.max_frames)  # (B, 3, 1, H, W) each, oldest first
        self.last_pixels: Tensor | None = None  # (B, 3, T, H, W) of the last observed block, in [-1, 1]

    @torch.no_grad()
    def observe(self, latents: Tensor) -> None:
        """Decode the next clean block (B, n, C, h, w) of normalised latents and keep its frames in the window."""
        if latents.ndim != 5 or latents.shape[2] != self.vae.config.z_dim:
            raise ShapeMismatchError(
                f"latents must be (B, n, {self.vae.config.z_dim}, h, w), got {list(latents.shape)}"
            )
        param = next(self.vae.parameters())
        pixels = self.decoder.decode(latents.permute(0, 2, 1, 3, 4).to(param.device, param.dtype))
        self.last_pixels = pixels
        self.frames.extend(pixels.split(1, dim=2))

    @torch.no_grad()
    def encode_oldest(self) -> Tensor:
        """The oldest kept pixel frame encoded alone (fresh cache) → normalised latent (B, 1, C, h, w), float32."""
        if not self.frames:
            raise ConfigError("no decoded frame to re-encode yet: observe() a block first")
        return self.vae.encode(self.frames[0]).permute(0, 2, 1, 3, 4).float()

    def fork(self) -> PixelWindowEncoder:
        """A copy that goes on from this stream's pixel window and decoder cache without touching them (a branch's
        future: each future decodes its own blocks into its own window)."""
        other = PixelWindowEncoder.__new__(PixelWindowEncoder)
        other.vae, other.max_frames = self.vae, self.max_frames
        other.decoder = copy.copy(self.decoder)  # the same VAE and options, the causal caches forked
        other.decoder.state = self.decoder.state.fork()
        other.frames = deque(self.frames, maxlen=self.max_frames)  # frames are never written in place
        other.last_pixels = self.last_pixels
        return other

    def nbytes(self) -> int:
        """Bytes the pixel window holds (each kept frame is a view of its block's pixels)."""
        blocks = {f.untyped_storage().data_ptr(): f.untyped_storage().nbytes() for f in self.frames}
        return sum(blocks.values())
