"""InferixVAEDecode: decode video latents to frames with the world model's VAE, one block at a time.

The streaming decode (causal-conv caches carried between blocks, equal to a full decode) is the VAE's
`stream_decoder()`; this node converts LATENT ↔ IMAGE, feeds it block by block and reports progress.
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
        import numpy as np

        from inferix_core.api import pixels_to_uint8
        from inferix_core.errors import ConfigError

        decoder = world_model.preview_decoder if use_preview_decoder and world_model.preview_decoder else world_model.vae
        if decoder is None:
            raise ConfigError("this world model has no VAE; pick a VAE file in Inferix Load World Model")
        samples = latent["samples"]  # [B, C, F, h, w]
        num_blocks = -(-samples.shape[2] // block_frames)
        hooks = rt.BlockHooks(cls.hidden.unique_id, num_blocks)
        # Temporary: the loop below belongs in the core (an `api.decode_video(world_model, latents, hooks)`);
        # replace it with that one call when it exists.
        stream, blocks = decoder.stream_decoder(), []
        try:
            for index in range(num_blocks):
                chunk = samples[:, :, index * block_frames:(index + 1) * block_frames]
                pixels = stream.decode(chunk.to(world_model.device, decoder_dtype(decoder)))  # [B, 3, T, H, W]
                blocks.append(pixels_to_uint8(pixels))  # [T, H, W, 3] uint8 of batch item 0
                hooks.on_block_end(index, blocks[-1], {})
        finally:
            hooks.close()
        return io.NodeOutput(frames_to_image(np.concatenate(blocks)))


def decoder_dtype(decoder: Any) -> Any:
    """The dtype of a decoder's weights (latents are cast to it)."""
    return next(decoder.parameters()).dtype
