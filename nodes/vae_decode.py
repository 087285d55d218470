"""InferixVAEDecode: decode video latents to frames with the world model's VAE, one block at a time.

The streaming decode (causal-conv caches carried between blocks, equal to a full decode) is
`inferix_core.api.decode_video`; this node converts LATENT ↔ IMAGE and reports progress. The LATENT is a
core one (VAE-space Wan 2.1 latents, from Block Denoise or any core sampler, e.g. ComfyUI's own
SamplerARVideo through SamplerCustomAdvanced); it is normalised here (`core_interop`). The VAE is the world
model's, or a core `VAE` (Load VAE with a Wan 2.1 VAE) whose weights are copied into our streaming VAE.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from inferix_core.errors import ConfigError

from . import comfy_runtime as rt
from . import types
from .block_denoise import frames_to_image
from .compat import io
from .core_interop import from_core_latent, wan_vae_from_core

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decoders:
    """What `decode_video` reads of a world model when only a core VAE is connected."""

    vae: Any
    preview_decoder: Any = None


def pick_decoders(world_model: Any, core_vae: Any) -> Any:
    """The world model, with its VAE replaced by the core VAE's weights when one is connected."""
    import dataclasses

    if core_vae is None:
        if world_model is None:
            raise ConfigError(
                "Inferix VAE Decode needs a VAE: connect a world model (Inferix Load World Model) "
                "or a core VAE (Load VAE with a Wan 2.1 VAE)"
            )
        return world_model
    device = world_model.device if world_model is not None else rt.torch_device()
    vae = wan_vae_from_core(core_vae, device=device)
    if world_model is None:
        return Decoders(vae)
    return dataclasses.replace(world_model, vae=vae)


class InferixVAEDecode(io.ComfyNode):
    """Streaming Wan VAE decode of a LATENT video ([B, C, F, h, w]) into an IMAGE batch."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixVAEDecode",
            display_name="Inferix VAE Decode (streaming)",
            category=f"{types.CATEGORY}/latent",
            description="Decodes latents block by block with the world model's VAE, keeping memory flat for "
            "long videos. The result equals a full decode.",
            inputs=[
                io.Latent.Input(
                    "latent",
                    tooltip="Video latents, samples [B, C, F, h, w]: Inferix Block Denoise, or "
                    "any core LATENT of Wan 2.1 latents (e.g. SamplerCustomAdvanced "
                    "with Sampler AR Video).",
                ),
                io.Int.Input(
                    "block_frames",
                    default=3,
                    min=1,
                    max=64,
                    step=1,
                    tooltip="Latent frames decoded per call; only memory and progress granularity "
                    "change, not the result.",
                ),
                io.Boolean.Input(
                    "use_preview_decoder",
                    default=False,
                    tooltip="Decode with the fast preview decoder (TAEHV) when the model has one: "
                    "much faster, lower quality.",
                ),
                types.WorldModel.Input(
                    "world_model", optional=True, tooltip="Supplies the VAE (and the preview decoder)."
                ),
                io.Vae.Input(
                    "vae",
                    optional=True,
                    tooltip="A core VAE (Load VAE, Wan 2.1 VAE) to decode with instead of the world "
                    "model's; its weights are copied into the streaming decoder.",
                ),
            ],
            outputs=[io.Image.Output("frames", tooltip="Decoded frames, one IMAGE per video frame.")],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def validate_inputs(cls, block_frames: int | None = None) -> bool | str:
        if block_frames is not None and not 1 <= block_frames <= 64:
            return f"block_frames must be between 1 and 64, got {block_frames}"
        return True

    @classmethod
    def execute(
        cls, latent: dict, block_frames: int, use_preview_decoder: bool, world_model: Any = None, vae: Any = None
    ) -> io.NodeOutput:
        from inferix_core.api import decode_video

        if world_model is not None:
            rt.ensure_loaded(world_model)  # ComfyUI reloads it if it evicted it since Block Denoise
        decoders = pick_decoders(world_model, vae)
        samples = latent["samples"]  # [B, C, F, h, w], VAE space (core LATENT)
        if samples.ndim != 5:
            raise ConfigError(
                f"Inferix VAE Decode takes video latents [B, C, F, h, w], got {list(samples.shape)} "
                "(an image LATENT? use the core VAE Decode)"
            )
        normalised = from_core_latent(decoders.vae, samples)
        hooks = rt.BlockHooks(cls.hidden.unique_id, -(-samples.shape[2] // block_frames))
        try:
            frames = decode_video(
                decoders,
                normalised.permute(0, 2, 1, 3, 4),
                hooks,
                block_frames=block_frames,
                decoder="preview" if use_preview_decoder else "vae",
            )  # uint8 [T, H, W, 3]
        finally:
            hooks.close()
        return io.NodeOutput(frames_to_image(frames))
