"""The block loop's data: requests, per-block outputs, a stream's state, noise sources and the hooks a caller
plugs in (split out of block_diffusion.py; `inferix_core.pipeline` re-exports them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..cache import KVCache


class SeededNoise:
    """Gaussian noise from one torch.Generator, in the reference's draw order.

    The reference draws the whole initial noise first, then one tensor per re-noise step. With
    `total_shape` given (a finite run) we do the same, so a seed reproduces the reference bitwise on CPU.
    Without it (an open-ended stream) each block's initial noise is drawn when the block starts.
    Noise is drawn on `device` ("cpu" by default, so CPU and GPU runs see the same numbers).
    """

    def __init__(self, seed: int, device: str | torch.device = "cpu", total_shape: tuple[int, ...] | None = None):
        self.generator = torch.Generator(device=device).manual_seed(int(seed))
        self.device = device
        self._upfront = torch.randn(total_shape, generator=self.generator, device=device) if total_shape else None

    def initial(self, start_frame: int, shape: tuple[int, ...]) -> torch.Tensor:
        if self._upfront is not None:
            return self._upfront[:, start_frame : start_frame + shape[1]]
        return torch.randn(shape, generator=self.generator, device=self.device)

    def step(self, block: int, step: int, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator, device=self.device)


@dataclass
class GenerationRequest:
    """One generation. Latent tensors are (B, F, C, H, W)."""

    num_blocks: int
    latent_height: int
    latent_width: int
    context: torch.Tensor  # (B, L, text_dim) prompt embedding, or (B, L, clip_dim) image tokens (Matrix-Game)
    seed: int = 0
    batch_size: int = 1
    noise: SeededNoise | object | None = None  # anything with initial() and step(); default SeededNoise(seed)
    # (B, F, A) or fn(start, n), or an object with for_block(start, n) (MatrixGameConditioning) whose result the
    # model takes as `action` in every call of that block
    actions: torch.Tensor | Callable[[int, int], torch.Tensor] | object | None = None
    prompt_schedule: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (block index, context)
    initial_latents: torch.Tensor | None = None  # clean frames to continue from (B, F0, C, H, W)
    # at a prompt_schedule switch: False = hard switch (cached K/V kept), True = a KV re-cache under the new prompt
    # first, in `recache_style` (pipeline/recache.py: "window" LongLive's with global_sink true, "window_reset" with
    # global_sink false, "blocks")
    recache_on_switch: bool = False
    recache_style: str = "window"
    # Wan 2.2 TI2V / LongLive 2.0 image start: clean latents (B, k, C, H, W) held as the first k frames of the
    # first generated block, at timestep 0 in every call of that block (the other frames denoise as usual)
    clean_first_latents: torch.Tensor | None = None
    # Wan 2.1 I2V: CLIP vision tokens (B, 257, clip_dim) of the start image, attended beside the prompt (`context`)
    image_context: torch.Tensor | None = None
    # LongLive 2.0 shots: generated-block indices (>= 1) that start a new shot; with the sampling's shot settings
    # each pins its first frames as a shot sink and shifts RoPE by one more shot_rope_offset (SamplingConfig)
    shot_blocks: tuple[int, ...] = ()
    # continue a saved world (`world_state.load_world_state`) instead of a fresh stream: no initial latents;
    # `resume_history` are the (start, clean latents, action) blocks a re-cache re-runs (`stream_history`)
    resume_state: StreamState | None = None
    resume_history: list[tuple[int, torch.Tensor, torch.Tensor | None]] = field(default_factory=list)
    keep_history: bool = False  # keep `stream_history` without a prompt switch too (to save the world at the end)
    # write the last block's clean K/V too: only a stream that is continued or saved reads them (the frames are
    # the same either way); generate_video turns it off unless it keeps the world state
    final_context_pass: bool = True


@dataclass
class BlockOutput:
    index: int
    start_frame: int
    latents: torch.Tensor  # (B, n, C, H, W) clean x0 of the block
    seconds: float  # wall time of this block's model calls
    is_initial: bool = False  # an initial (given) block, not generated


@dataclass
class StreamState:
    """What one stream carries from block to block, held explicitly so a caller can change it at a boundary.

    `BlockDiffusionPipeline.stream()` keeps one for a finite request; `InteractiveSession` keeps one open-ended
    and swaps `text` (prompt switch) or re-writes `cache` (re-cache) between blocks.
    """

    cache: KVCache
    text: Any  # CrossAttentionCache of the current prompt
    noise: Any  # anything with initial(start_frame, shape) and step(block, step, shape)
    latent_height: int
    latent_width: int
    batch_size: int = 1
    next_frame: int = 0  # absolute index of the next block's first latent frame
    next_block: int = 0  # index of the next generated block (the noise source counts these)
    # kv_recompute_frames > 0 only: the first clean latent frame and the newest ones after it (B, n, C, H, W)
    first_latent: Any = None
    recent_latents: Any = None
    clean_prefix: torch.Tensor | None = None  # (B, k, C, H, W) held clean in the next generated block, then cleared
    shot_index: int = 0  # shots started so far (LongLive 2.0 multi-shot)
    rope_offset: float = 0.0  # added to the RoPE temporal position of every frame written from now on
    # clean blocks the stream's history keeps beyond the resident ones: those with frames among the last
    # `history_frames` (a "window_reset" re-cache re-writes the last window_frames frames, sink slots included)
    history_frames: int = 0
    # stream() only: the last block's context pass, run when the next block is asked for or by `settle()`
    pending_context: DeferredContextPass | None = None


class FirstFrameEncoder(Protocol):
    """Pixels back into latents for Krea's `keep_first_frame=False` (SamplingConfig.keep_first_frame).

    The pipeline hands it every clean block in order and, once the KV window has rolled past the first
    latent frame, asks for the re-encoded first context frame. `inferix_core.vae.PixelWindowEncoder` is the
    implementation on the Wan VAE; the pipeline never imports a VAE.
    """

    def reset(self) -> None:
        """Start a new stream."""

    def observe(self, latents: torch.Tensor) -> None:
        """Take the next clean block (B, n, C, h, w)."""

    def encode_oldest(self) -> torch.Tensor:
        """The first context frame (B, 1, C, h, w): the oldest decoded pixel frame still kept, encoded alone."""


class PipelineHooks:
    """Callbacks of the loop; subclass and override what you need (profiler, progress, previews)."""

    def on_block_start(self, index: int, start_frame: int) -> None: ...

    def on_step(self, index: int, step: int, x0: torch.Tensor) -> None: ...

    def on_context_pass(self, index: int) -> None: ...

    def on_block_end(self, output: BlockOutput) -> None: ...

    def stage(self, name: str) -> contextlib.AbstractContextManager:
        """Wrap a span of the block ("denoise" per step, "context_pass"); a profiler times it."""
        return contextlib.nullcontext()

    def check_interrupt(self) -> None:
        """Raise GenerationInterruptedError to stop between steps."""


@dataclass
class DeferredContextPass:
    """A generated block's context pass, held in its StreamState until the consumer asks for the next block.

    It runs (`BlockDiffusionPipeline.settle`) with what was in force when the block was made (its prompt's
    cross-attention K/V; its RoPE offset, which only the next block can change) before anything else
    touches the cache, so every later call sees the cache an immediate pass would have written; only the GPU
    order changes (the consumer's decode goes first). It holds no reference to its state or pipeline: a
    state dropped with a pass still pending is freed at once, its KV cache with it (no reference cycle).
    """

    hooks: PipelineHooks
    index: int
    latents: torch.Tensor
    start_frame: int
    action: torch.Tensor | None
    text: Any
    new_shot: bool
