"""What a Wan transformer call takes besides the latents: a prompt's cached cross-attention K/V and Wan 2.1 I2V's
start-image conditioning (per run, sliced per block)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import ShapeMismatchError


@dataclass
class CrossAttentionCache:
    """Per-layer text K/V for one prompt, computed once and reused by every call (prompt → K/V).

    Wan 2.1 I2V models also cross-attend to the CLIP tokens of their start image with K/V of their own
    (`k_img`/`v_img`): those are `image_keys`/`image_values`, kept across prompt switches.
    """

    keys: list[torch.Tensor]  # per layer (B, L_text, H, D)
    values: list[torch.Tensor]
    image_keys: list[torch.Tensor] | None = None  # per layer (B, 257, H, D); Wan I2V only
    image_values: list[torch.Tensor] | None = None


@dataclass
class StartImageBlockInput:
    """A Wan 2.1 I2V call's per-chunk input: cond_concat (B, 20, n, H, W) = [mask (4) ; start-image latent (16)]
    of the chunk's latent frames, concatenated to the noisy latents (in_dim 36), as `MatrixGameBlockInput`
    without the actions."""

    cond_concat: torch.Tensor

    def to(self, device, dtype: torch.dtype | None = None) -> StartImageBlockInput:
        return StartImageBlockInput(self.cond_concat.to(device=device, dtype=dtype or self.cond_concat.dtype))


@dataclass
class StartImageConditioning:
    """One Wan 2.1 I2V run's cond_concat (B, 20, F, H, W); the pipeline slices it per block (`for_block`)."""

    cond_concat: torch.Tensor

    def for_block(self, start_frame: int, num_frames: int) -> StartImageBlockInput:
        end = start_frame + num_frames
        if end > self.cond_concat.shape[2]:
            raise ShapeMismatchError(
                f"cond_concat covers {self.cond_concat.shape[2]} latent frames; the block needs frames up to {end}"
            )
        return StartImageBlockInput(self.cond_concat[:, :, start_frame:end])
