"""InferixVAEDecode: decode video latents to frames with the world model's VAE, one block at a time.

The streaming decode (causal-conv caches carried between blocks, equal to a full decode) is
`inferix_core.api.decode_video`; this node converts LATENT ↔ IMAGE and reports progress.
"""

from __future__ import annotations

import logging
from typing import Any

from . import comfy_runtime as rt
from . import types
from .block_denoise import frames_to_image
from .compat import io

log = logging.getLogger(__name__)


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
                types.WorldModel.Input("world_model", tooltip="Supplies the VAE (and the preview decoder)."),
                io.Latent.Input("latent", tooltip="Video latents, samples [B, C, F, h, w] (Inferix Block Denoise "
                                                  "or a Wan 2.1 latent)."),
                io.Int.Input("block_frames", default=3, min=1, max=64, step=1,
                             tooltip="Latent frames decoded per call; only memory and progress granularity "
                                     "change, not the result."),
                io.Boolean.Input("use_preview_decoder", default=False,
                                 tooltip="Decode with the fast preview decoder (TAEHV) when the model has one: "
                                         "much faster, lower quality."),
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
    def execute(cls, world_model: Any, latent: dict, block_frames: int, use_preview_decoder: bool) -> io.NodeOutput:
        from inferix_core.api import decode_video

        samples = latent["samples"]  # [B, C, F, h, w]
        hooks = rt.BlockHooks(cls.hidden.unique_id, -(-samples.shape[2] // block_frames))
        try:
            frames = decode_video(world_model, samples.permute(0, 2, 1, 3, 4), hooks, block_frames=block_frames,
                                  decoder="preview" if use_preview_decoder else "vae")  # uint8 [T, H, W, 3]
        finally:
            hooks.close()
        return io.NodeOutput(frames_to_image(frames))
