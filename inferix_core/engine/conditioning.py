"""Conditioning for a run: prompt text or embeddings, named actions, start frames, latent geometry.

Turns what a user gives (strings, action names, a clip to continue) into the tensors the block loop
takes. No generation happens here.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import ConfigError, ShapeMismatchError
from ..models.matrix_game2 import MatrixGameConditioning
from ..models.registry import WorldModel
from ..pipeline import GenerationRequest, SamplingConfig

log = logging.getLogger(__name__)


def encode_prompt(world_model: WorldModel, prompt: str | torch.Tensor) -> torch.Tensor:
    """Text (or an embedding) → (1, L, text_dim) context for the transformer."""
    if isinstance(prompt, torch.Tensor):
        ctx = prompt if prompt.dim() == 3 else prompt.unsqueeze(0)
        if ctx.shape[-1] != world_model.config.text_dim:
            raise ShapeMismatchError(
                f"prompt embedding has {ctx.shape[-1]} features; this model expects {world_model.config.text_dim}"
            )
        return ctx
    if world_model.text_encoder is not None:
        return world_model.text_encoder.encode([prompt])  # (1, text_len, text_dim)
    if world_model.default_context is not None:
        if prompt:
            log.info("this model has no text encoder; the prompt text is ignored (it is steered by actions)")
        return world_model.default_context
    raise ConfigError(
        "this model has no text encoder loaded: pick a umT5 file in text_encoders (LoadWorldModel) "
        "or pass a CONDITIONING / prompt embedding"
    )


def actions_to_tensor(world_model: WorldModel, actions, num_frames: int) -> torch.Tensor | None:
    """Actions as (1, F, action_dim): a tensor, or a list of action names (one per block or per frame)."""
    if actions is None:
        return None
    if isinstance(actions, torch.Tensor):
        act = actions if actions.dim() == 3 else actions.unsqueeze(0)
    else:
        names = list(actions)
        if not world_model.action_names:
            raise ConfigError("this model takes no named actions")
        unknown = sorted({a for a in names if a not in world_model.action_names})
        if unknown:
            raise ConfigError(f"unknown actions {unknown}; this model knows {list(world_model.action_names)}")
        idx = torch.tensor([world_model.action_names.index(a) for a in names])
        act = torch.nn.functional.one_hot(idx, len(world_model.action_names)).float().unsqueeze(0)
    if act.shape[1] < num_frames:  # hold the last action (a per-block list covers its block's frames)
        per = max(1, num_frames // act.shape[1]) if act.shape[1] else 1
        act = act.repeat_interleave(per, dim=1)
        if act.shape[1] < num_frames:
            act = torch.cat([act, act[:, -1:].expand(-1, num_frames - act.shape[1], -1)], dim=1)
    return act[:, :num_frames]


def latent_size(world_model: WorldModel, width: int, height: int) -> tuple[int, int]:
    s = world_model.spatial_compression
    step = s * world_model.config.patch_size[1]  # WorldModel.size_step, read off the same config
    if width % step or height % step or width < step or height < step:
        near = "x".join(str(max(step, round(v / step) * step)) for v in (width, height))
        raise ConfigError(
            f"width and height must be multiples of {step} for this {world_model.family} model (VAE stride {s} x "
            f"patch {world_model.config.patch_size[1]}); got {width}x{height}, try {near}"
        )
    return height // s, width // s


def _initial_latent_count(num_latent: int, sampling: SamplingConfig) -> int:
    """Latent frames of start frames kept: whole blocks (plus the 1-frame first block if the family has one)."""
    first = 1 if sampling.independent_first_frame else 0
    n = sampling.block_frames
    return first + max(1, (num_latent - first) // n) * n


def encode_start_frames(
    world_model: WorldModel, frames, width: int, height: int, sampling: SamplingConfig | None = None
) -> torch.Tensor:
    """Given video frames → clean initial latents (1, F0, C, h, w) of whole blocks, to continue from.

    Frames are uint8 [T, H, W, 3] (0..255) or float [T, H, W, 3] in 0..1 (a ComfyUI IMAGE). The causal VAE
    turns 1 + 4k frames into 1 + k latent frames, and the pipeline takes whole blocks, so:

    * trim: the *oldest* frames are dropped until the rest encode to whole blocks (the newest frames
      are what the continuation must match);
    * pad: fewer frames than one block needs are padded at the front with copies of the first frame
      (a still start), so even a single image works.

    Raises ConfigError when the model has no VAE encoder, ShapeMismatchError on a size mismatch.
    """
    sampling = sampling or world_model.sampling
    vae = world_model.vae
    if vae is None or not callable(getattr(vae, "encode", None)):
        raise ConfigError(
            "start_frames need a VAE with an encoder; this world model has none (load a VAE file, "
            "the preview decoder cannot encode)"
        )
    x = torch.as_tensor(np.asarray(frames) if not isinstance(frames, torch.Tensor) else frames)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ShapeMismatchError(f"start_frames must be [T, H, W, 3], got {list(x.shape)}")
    if (x.shape[1], x.shape[2]) != (height, width):
        raise ShapeMismatchError(
            f"start_frames are {x.shape[2]}x{x.shape[1]} but the video is {width}x{height}; "
            "resize them (e.g. ComfyUI's Upscale Image) or change width/height"
        )
    x = x.float() / 127.5 - 1 if x.dtype == torch.uint8 else x.float().clamp(0, 1) * 2 - 1  # [-1, 1]
    stride = world_model.temporal_compression
    keep = _initial_latent_count(1 + (x.shape[0] - 1) // stride, sampling)
    need = 1 + (keep - 1) * stride  # pixel frames that encode to `keep` latent frames
    if x.shape[0] < need:
        log.info("start_frames: %d frames pad to %d (one block) with copies of the first", x.shape[0], need)
        x = torch.cat([x[:1].expand(need - x.shape[0], -1, -1, -1), x])
    elif x.shape[0] > need:
        log.info("start_frames: keeping the newest %d of %d frames (whole blocks)", need, x.shape[0])
        x = x[-need:]
    param = next(vae.parameters())
    video = x.permute(3, 0, 1, 2).unsqueeze(0).to(param.device, param.dtype)  # (1, 3, T, H, W)
    with torch.no_grad():
        latents = vae.encode(video)  # (1, C, F0, h, w) normalised
    return latents.permute(0, 2, 1, 3, 4).to(world_model.device, world_model.dtype)  # (1, F0, C, h, w)


def matrix_game_request(cond: MatrixGameConditioning, num_blocks: int, *, seed: int = 0, noise=None,
                        block_frames: int = 3) -> GenerationRequest:  # fmt: skip
    """A GenerationRequest for a Matrix-Game run of `num_blocks` blocks (latent size from cond_concat)."""
    if cond.num_latent_frames < num_blocks * block_frames:
        raise ShapeMismatchError(
            f"cond_concat has {cond.num_latent_frames} latent frames; {num_blocks} blocks need {num_blocks * block_frames}"
        )
    b, _, _, h, w = cond.cond_concat.shape
    return GenerationRequest(
        num_blocks=num_blocks, latent_height=h, latent_width=w, context=cond.visual_context, seed=seed,
        batch_size=b, noise=noise, actions=cond,
    )  # fmt: skip
