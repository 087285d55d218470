"""Forks of a stream: what `Engine.fork` is made of.

A fork is a future of one stream from its current block boundary on, with its own prompt, actions and seed.
Where the parent's KV pages live in a page arena, a fork maps them (each page's reference count + 1, nothing
copied; a page a fork writes into while another stream still maps it is copied first). Krea's KV recompute
rebuilds each block's cache from the stream's clean context latents, so a fork there gets a fresh cache, the
parent's context latents (never written in place) and, with keep_first_frame=False, a fork of the pixel window
its first context frame is re-encoded from. Matrix-Game's keyboard/mouse action caches are not arena pages: such
a stream is refused, with the reason.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..cache import create_kv_cache
from ..cache.shared import StreamKVCache
from ..errors import ConfigError, ShapeMismatchError
from ..pipeline import BlockDiffusionPipeline, SeededNoise
from ..pipeline.block_diffusion import StreamState
from ..pipeline.streams import carry_position, clone_noise
from ..tensors import to_device_async

Actions = torch.Tensor | Callable[[int, int], torch.Tensor] | None


@dataclass(eq=False)
class Future:
    """What one fork does differently from its parent, from the fork point on.

    context: a prompt embedding (1, L, text_dim); None keeps the parent's prompt.
    actions: rows (1, F, A) counted from the fork's first frame, or fn(start_frame, num_frames) → (1, n, A)
        with absolute frames; None for models without actions.
    seed: the fork's own noise seed; None continues the parent's noise stream (a copy of its generator).
    name: a label for logs and the live view.
    """

    context: torch.Tensor | None = None
    actions: Actions = None
    seed: int | None = None
    name: str = ""


def action_rows(actions: Actions, start: int, block_frames: int, origin: int = 0, who: str = "") -> torch.Tensor | None:
    """A stream's or a fork's action rows for the block at absolute frame `start`: `actions(start, n)` when it is a
    function of the absolute frame, else rows counted from `origin` (a fork's first frame; 0 for a stream)."""
    if actions is None:
        return None
    if callable(actions):
        return actions(start, block_frames)
    rel = start - origin
    rows = actions[:, rel : rel + block_frames]
    if rows.shape[1] != block_frames:
        raise ShapeMismatchError(
            f"{who} has actions for {actions.shape[1]} frames from frame {origin}; the block at frame {start} needs "
            f"rows {rel}..{rel + block_frames - 1}. Give one action row per latent frame."
        )
    return rows


def check_branchable(pipe: BlockDiffusionPipeline) -> None:
    """Refuse, in one line naming the reason, a model whose streams cannot be forked yet (before anything is forked)."""
    if getattr(pipe.model.config, "action_config", None) is not None:
        raise ConfigError(
            "a Matrix-Game world cannot branch yet: its keyboard/mouse action caches are not pages of the arena (no "
            "copy-on-write) and each future needs its own action track; save the world and resume it once per future"
        )


def check_forkable(pipe: BlockDiffusionPipeline, parent: StreamState) -> None:
    """Refuse, naming the reason, a stream that cannot be forked here (before anything is planned or forked)."""
    check_branchable(pipe)
    if not pipe.sampling.kv_recompute_frames and not isinstance(parent.cache, StreamKVCache):
        raise ConfigError(
            f"branching needs a stream whose pages live in a page arena, not a {type(parent.cache).__name__}; "
            "start it with inferix_core.clients.branching.start_stream (or Engine.adopt it)"
        )
    if parent.clean_prefix is not None:
        raise ConfigError("this stream holds clean first latents for its next block; branch after that block")


def prompt_kv(pipe: BlockDiffusionPipeline, parent_text, context: torch.Tensor):
    """A fork's prompt K/V; a Wan 2.1 I2V stream's start-image K/V are kept beside the new prompt's."""
    ctx = to_device_async(context, pipe.device)
    if getattr(parent_text, "image_keys", None) is not None:
        return pipe.model.prepare_context(ctx, keep_image_of=parent_text)
    return pipe.model.prepare_context(ctx)


def fork_state(pipe: BlockDiffusionPipeline, parent: StreamState, future: Future) -> StreamState:
    """The stream state of one future of `parent`: its pages shared (or, with KV recompute, a fresh cache), its
    own prompt K/V and noise, the parent's position and context latents."""
    text = parent.text if future.context is None else prompt_kv(pipe, parent.text, future.context)
    noise = clone_noise(parent.noise) if future.seed is None else SeededNoise(future.seed)
    recompute = bool(pipe.sampling.kv_recompute_frames)
    cache = create_kv_cache(pipe.cache_config, parent.cache.spec) if recompute else parent.cache.fork()
    state = StreamState(
        cache, text, noise, parent.latent_height, parent.latent_width, 1, parent.next_frame, parent.next_block
    )
    state.first_latent, state.recent_latents = parent.first_latent, parent.recent_latents  # never written in place
    carry_position(parent, state)
    return state


class WindowPixels:
    """A stream decoder that hands on the pixels a pixel window (`vae.PixelWindowEncoder`) decoded in the loop:
    a Krea fork's frames, decoded once (as `api.EncoderPixels` for a stream)."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.encoder.last_pixels


def fork_decoder(decoder):
    """A streaming decoder that continues from `decoder`'s causal caches without touching them."""
    other = copy.copy(decoder)  # the same VAE and options
    other.state = decoder.state.fork()
    return other


def decodes_in_loop(decoder: Any, pipe: BlockDiffusionPipeline) -> bool:
    """Whether `decoder` shows the pixels the loop's own pixel window decoded (Krea's keep_first_frame=False)."""
    return decoder is not None and getattr(decoder, "encoder", None) is pipe.first_frame_encoder is not None
