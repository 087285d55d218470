"""The block loop's one body, and the finite run's inputs: what every driver of the loop calls per block.

`advance` is the body: a prompt switch (hard, or with a re-cache of the resident blocks), then
`BlockDiffusionPipeline.denoise_block` with the block's context pass left pending, then the resident-block
history a re-cache or a saved world needs. `BlockDiffusionPipeline.stream` (headless: tests, benchmarks,
training) and `engine.Engine.step` (decode, sinks, profiler: the facade, the interactive session) both call it,
so a lever or a new per-block input is threaded through here once. `RequestInputs` turns a finite
`GenerationRequest` (prompt schedule, actions, shots) into one `BlockInput` per block; the interactive session
builds its `BlockInput`s from live events instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from .frames import initial_block_ranges, keep_resident
from .recache import RECACHE_STYLES, check_style, history_frames
from .types import BlockOutput, GenerationRequest, PipelineHooks, SeededNoise, StreamState

History = list[tuple[int, torch.Tensor, Any]]  # (start frame, clean latents (B, n, C, H, W), action)
SWITCHES = ("none", *RECACHE_STYLES)


@dataclass(frozen=True)
class BlockInput:
    """What one block is generated with, beyond the stream's state.

    action: the model's per-block input (an action tensor, a start image's rows), used by every call of the block.
    context: a prompt embedding in force from this block on (None: the prompt stays).
    recache: how a new `context` treats the cached K/V: "none" keeps them (a hard switch), "window" is
        LongLive's re-cache, "blocks" re-runs every resident block (pipeline/recache.py).
    new_shot: the block starts a shot (LongLive 2.0: RoPE offset, shot sink).
    """

    action: Any = None
    context: torch.Tensor | None = None
    recache: str = "none"
    new_shot: bool = False

    def __post_init__(self) -> None:
        if self.recache not in SWITCHES:
            raise ConfigError(f"recache must be one of {SWITCHES}, got {self.recache!r}")


class RequestInputs:
    """The per-block inputs of a finite `GenerationRequest`: its prompt schedule, actions and shots."""

    def __init__(self, pipe: Any, request: GenerationRequest):
        self.pipe, self.request = pipe, request
        self.schedule = dict(request.prompt_schedule)
        self.recache = request.recache_on_switch and bool(self.schedule)
        if self.recache:
            check_style(request.recache_style, pipe.cache_config)
        self.shots = set(request.shot_blocks)
        if 0 in self.shots or (self.shots and self.recache):
            raise ConfigError("shot_blocks start at block 1 and cannot be combined with a re-cache on prompt switches")

    @property
    def keeps_history(self) -> bool:
        """Whether the run keeps its resident blocks (a re-cache re-runs them; a saved world stores them)."""
        return self.recache or self.request.keep_history

    def action(self, start_frame: int, num_frames: int) -> Any:
        return self.pipe.actions_for(self.request, start_frame, num_frames)

    def block(self, index: int, start_frame: int, num_frames: int) -> BlockInput:
        context = self.schedule.get(index)
        recache = self.request.recache_style if context is not None and self.recache else "none"
        return BlockInput(self.action(start_frame, num_frames), context, recache, index in self.shots)


def open_request(pipe: Any, request: GenerationRequest) -> StreamState:
    """The stream a request runs on: a fresh one (noise drawn up front, the reference's order) or its saved world."""
    pipe.check_request(request)
    n = pipe.sampling.block_frames
    num_initial = 0 if request.initial_latents is None else request.initial_latents.shape[1]
    keep = history_frames(request.recache_style, pipe.cache_config) if request.recache_on_switch else 0
    if request.resume_state is not None:  # a saved world: its cache, prompt, noise and position
        if num_initial:
            raise ConfigError("a resumed world continues from its own frames; pass no initial latents")
        request.resume_state.history_frames = keep
        return request.resume_state
    h, w, bsz = request.latent_height, request.latent_width, request.batch_size
    shape = (bsz, request.num_blocks * n, pipe.model.config.out_dim, h, w)
    noise = request.noise or SeededNoise(request.seed, total_shape=shape)
    state = pipe.start_stream(request.context, h, w, batch_size=bsz, noise=noise,
                              max_frames=num_initial + request.num_blocks * n,
                              image_context=request.image_context)  # fmt: skip
    state.clean_prefix = request.clean_first_latents
    state.history_frames = keep
    return state


def recache_resident(pipe: Any, state: StreamState, style: str, history: History | None) -> bool:
    """Re-write the resident blocks' K/V under the prompt now in `state` (pipeline/recache.py; "none" does
    nothing). Returns whether a re-cache ran (it needs resident blocks in `history`)."""
    blocks = keep_resident(history or [], state)
    if style == "none" or not blocks:
        return False
    pipe.recache(state, blocks, style)
    return True


def switch_prompt(pipe: Any, state: StreamState, context: torch.Tensor, recache: str, history: History | None) -> bool:
    """A new prompt from the coming block: its cross-attention K/V, and with `recache` other than "none" the
    resident blocks' K/V re-written under it. Returns whether a re-cache ran."""
    pipe.set_prompt(state, context)
    return recache_resident(pipe, state, recache, history)


def prime(
    pipe: Any, state: StreamState, initial_latents: torch.Tensor | None, inputs: RequestInputs, history: History | None
) -> Iterator[tuple[BlockOutput, History | None]]:
    """Given frames (B, F0, C, H, W) go in as context passes, split like generated blocks (the reference's
    initial latents); each is handed out as an `is_initial` block."""
    num_initial = 0 if initial_latents is None else initial_latents.shape[1]
    ranges = initial_block_ranges(num_initial, pipe.sampling.block_frames, pipe.sampling.independent_first_frame)
    for i, (a, b) in enumerate(ranges):
        t0 = time.perf_counter()
        latents = initial_latents[:, a:b].to(pipe.device)
        action = inputs.action(a, b - a)
        pipe.context_pass(state, latents, a, action)
        state.next_frame = b
        if history is not None:
            history = keep_resident([*history, (a, latents, action)], state)
        yield BlockOutput(i, a, latents, time.perf_counter() - t0, is_initial=True), history


def advance(
    pipe: Any, state: StreamState, block: BlockInput, hooks: PipelineHooks, history: History | None
) -> tuple[BlockOutput, History | None]:
    """The block body: the block's prompt switch, its denoising (context pass left pending in `state`, run by
    the next block, a re-cache, `settle()` or a capture), and the resident-block history kept up to date."""
    context = block.context
    if context is not None and block.recache != "none" and history:
        switch_prompt(pipe, state, context, block.recache, history)
        context = None  # in force already
    out = pipe.denoise_block(
        state, block.action, hooks, context=context, new_shot=block.new_shot, defer_context_pass=True
    )
    if history is not None:
        history = keep_resident([*history, (out.start_frame, out.latents, block.action)], state)
    return out, history


@torch.no_grad()
def stream_request(pipe: Any, request: GenerationRequest, hooks: PipelineHooks) -> Iterator[BlockOutput]:
    """`BlockDiffusionPipeline.stream`: the request's blocks, headless (no decoder, no sinks)."""
    state = open_request(pipe, request)
    inputs = RequestInputs(pipe, request)
    pipe.stream_state = state  # what a caller needs to save the world after any block
    history: History | None = list(request.resume_history) if inputs.keeps_history else None
    pipe.stream_history = history or []
    primed = history
    for out, primed in prime(pipe, state, request.initial_latents, inputs, history):
        pipe.stream_history = primed or []
        yield out
    history = primed
    n = pipe.sampling.block_frames
    for index in range(request.num_blocks):
        out, history = advance(pipe, state, inputs.block(index, state.next_frame, n), hooks, history)
        pipe.stream_history = history or []
        yield out
    if request.final_context_pass:
        pipe.settle(state)
