"""The engine: one object that owns the block loop of a world model, for every client.

`Engine` holds the model's pipeline (sampling, cache settings, Krea's pixel window) and the run's decoder
choice and profiler. `open` / `resume` give a `Stream`: the pipeline's state (KV cache, prompt K/V, noise,
position), its streaming decoder, its sinks and the resident blocks a re-cache or a saved world needs.
`step` is the one per-block body (pipeline/loop.py `advance`: prompt switch, denoise, history; then decode,
sinks, profiler, hooks); `run` steps a finite request and returns a `VideoResult`; `switch_prompt`,
`capture` and `close` are what an open-ended stream needs between blocks. `generate_video` (api.py) and
`InteractiveSession` (clients/session.py) are thin clients of it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..cache import KVCacheConfig, MemoryPlan
from ..errors import GenerationInterruptedError
from ..models.registry import WorldModel
from ..pipeline import BlockDiffusionPipeline, BlockOutput, GenerationRequest, SamplingConfig, SeededNoise
from ..pipeline.loop import (
    BlockInput,
    History,
    RequestInputs,
    advance,
    open_request,
    prime,
    recache_resident,
    switch_prompt,
)
from ..profiling import NullProfiler, Profiler
from ..vae.pixel_window import PixelWindowEncoder
from .run_output import (
    GenerationHooks,
    ProfiledHooks,
    VideoResult,
    decode_to_sinks,
    first_frame_encoder_for,
    kv_cache_memory,
    profile_block_end,
    run_stream_decoder,
)
from .run_plan import plan_run
from .world_state import (
    WorldState,
    capture_world_state,
    history_from,
    history_tensors,
    load_world_state,
    model_identity,
)

log = logging.getLogger(__name__)


def run_pipeline(
    world_model: WorldModel,
    sampling: SamplingConfig | None = None,
    cache: KVCacheConfig | None = None,
    first_frame_encoder: PixelWindowEncoder | None = None,
) -> BlockDiffusionPipeline:
    """The block pipeline of one run: the model's sampling and cache unless others are given; Krea's re-encoding
    VAE in the loop when the run needs it."""
    return BlockDiffusionPipeline(
        world_model.transformer,
        sampling or world_model.sampling,
        cache or world_model.default_cache,
        first_frame_encoder=first_frame_encoder,
    )


@dataclass
class Stream:
    """One stream of blocks: the pipeline's state and what the engine adds around it."""

    state: Any  # pipeline.types.StreamState: cache, prompt K/V, noise, position, pending context pass
    decoder: Any | None  # the streaming decoder (None: latents only)
    sinks: list = field(default_factory=list)
    history: History | None = None  # resident (start, clean latents, action) blocks; None: not kept
    t_open: float = field(default_factory=time.perf_counter)
    first_frame_at: float | None = None  # perf_counter() of the first decoded frame

    @property
    def next_block(self) -> int:
        return self.state.next_block


@dataclass(frozen=True)
class EngineBlock:
    """One block as `Engine.step` hands it out."""

    index: int
    start_frame: int
    latents: torch.Tensor  # (B, n, C, h, w) clean latents
    frames: np.ndarray | None  # (T, H, W, 3) uint8 decoded frames, None without a decoder
    denoise_s: float
    decode_s: float
    recache_s: float = 0.0
    is_initial: bool = False


class Engine:
    """The block loop of one world model with one sampling and cache setting (see the module docstring).

    Args:
        decoder: "vae", or "preview" for the model's preview decoder (`run_output.choose_decoder`).
        decode: decode each block to pixels for the sinks (needs a VAE); False keeps latents only.
        profiler: gets block starts, stages (text encode is the client's), block ends with the cache's numbers.
    """

    def __init__(
        self,
        world_model: WorldModel,
        sampling: SamplingConfig | None = None,
        cache: KVCacheConfig | None = None,
        *,
        decoder: str = "vae",
        decode: bool = True,
        profiler: NullProfiler | None = None,
    ):
        self.world_model = world_model
        self.sampling = sampling or world_model.sampling
        self.cache_config = cache or world_model.default_cache
        self.decoder_kind, self.decode = decoder, decode
        self.profiler = profiler if profiler is not None else NullProfiler()
        self.first_frame_encoder = first_frame_encoder_for(world_model, self.sampling)  # Krea's keep_first_frame=False
        self.pipeline = run_pipeline(world_model, self.sampling, self.cache_config, self.first_frame_encoder)

    def plan(
        self,
        width: int,
        height: int,
        num_blocks: int,
        *,
        num_initial_frames: int = 0,
        streams: int = 1,
        available_bytes: int | None = None,
    ) -> MemoryPlan:
        """This engine's memory plan for a run of this shape (`run_plan.plan_run` with its sampling and cache
        settings): one `memory.PlanInput`, composed. Allocates nothing; `run_plan.check_plan` refuses it."""
        return plan_run(
            self.world_model, self.cache_config, width, height, num_blocks, self.sampling, num_initial_frames,
            available_bytes, streams=streams,
        )  # fmt: skip

    # -- streams -----------------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The model's identity a saved world is checked against (`world_state.model_identity`)."""
        return model_identity(self.world_model.transformer, self.world_model.family)

    def new_decoder(self, *, continues: bool = False):
        """A fresh streaming decoder (None with decode=False); `continues`: the stream continues given frames."""
        if not self.decode:
            return None
        return run_stream_decoder(self.world_model, self.decoder_kind, self.first_frame_encoder, continues=continues)

    def open(
        self,
        context: torch.Tensor,
        latent_height: int,
        latent_width: int,
        *,
        seed: int = 0,
        noise: Any = None,
        image_context: torch.Tensor | None = None,
        clean_prefix: torch.Tensor | None = None,
        sinks: Iterable[Any] = (),
        keep_history: bool = True,
    ) -> Stream:
        """An open-ended stream: a fresh cache, the prompt's K/V, per-block noise from `seed` (or `noise`)."""
        state = self.pipeline.start_stream(context, latent_height, latent_width, noise=noise or SeededNoise(seed),
                                           image_context=image_context)  # fmt: skip
        state.clean_prefix = clean_prefix
        return Stream(state, self.new_decoder(), list(sinks), [] if keep_history else None)

    def open_request(self, request: GenerationRequest, *, sinks: Iterable[Any] = (), decoder: Any = None) -> Stream:
        """A finite request's stream (noise drawn up front, the reference's order; or its `resume_state`).

        `decoder`: the stream decoder to use (a resumed world's, with its causal cache); default a fresh one."""
        t_open = time.perf_counter()  # a run's time counts its cache and prompt set-up
        state = open_request(self.pipeline, request)
        history = list(request.resume_history) if RequestInputs(self.pipeline, request).keeps_history else None
        if decoder is None:
            decoder = self.new_decoder(continues=request.initial_latents is not None)
        return Stream(state, decoder, list(sinks), history, t_open=t_open)

    def resume(self, world: WorldState, *, keep_history: bool = True) -> tuple[Any, Any, History]:
        """A saved world's (state, decoder, history): the decoder continues its saved cache when the world has one
        of this engine's kind, else decoding starts afresh (logged)."""
        decoder = self.new_decoder()
        extra = world.header["extra"]
        with_decoder = decoder is not None and world.header.get("decoder") is not None
        if with_decoder and extra.get("decoder_kind") != self.decoder_kind:
            with_decoder = False
        if decoder is not None and not with_decoder:
            log.info("the world state has no %s decoder cache; decoding starts afresh", self.decoder_kind)
        state = load_world_state(
            world, self.pipeline, identity=self.identity(), decoder=decoder if with_decoder else None
        )
        history = history_from(world, self.pipeline.device) if keep_history else None
        return state, decoder, history

    # -- the block body ----------------------------------------------------------------------------------
    @torch.no_grad()
    def step(
        self, stream: Stream, block: BlockInput | None = None, hooks: GenerationHooks | None = None, *, commit=True
    ) -> EngineBlock:
        """Generate, decode and sink one block. With `commit` its context pass runs right after the decode (so
        nothing outside sees it pending); without, it runs at the next step, re-cache, capture or `settle`."""
        out, stream.history = advance(
            self.pipeline, stream.state, block or BlockInput(), ProfiledHooks(self.profiler, hooks), stream.history
        )
        return self.emit(stream, out, hooks, commit=commit)

    @torch.no_grad()
    def emit(self, stream: Stream, out: BlockOutput, hooks: GenerationHooks | None, *, commit: bool) -> EngineBlock:
        """A made block to the decoder and sinks, then the profiler and hooks."""
        frames, decode_s = None, 0.0
        if stream.decoder is not None:
            frames, decode_s, ready_at = decode_to_sinks(
                stream.decoder, out.latents, out.index, stream.sinks, self.profiler, first_frame_alone=True
            )  # split only while a chunk-exact decoder starts its stream (run_output.starts_its_stream)
            if stream.first_frame_at is None and len(frames):
                stream.first_frame_at = ready_at
        if commit:
            self.pipeline.settle(stream.state)
        cache = stream.state.cache
        if not out.is_initial:  # given frames are context, not generated: the profiler never opened them
            profile_block_end(self.profiler, cache, out.index, frames)
        if hooks is not None:
            hooks.on_block_end(out.index, frames, {"denoise_s": out.seconds, "decode_s": decode_s,
                                                   **kv_cache_memory(cache)})  # fmt: skip
        return EngineBlock(out.index, out.start_frame, out.latents, frames, out.seconds, decode_s,
                           is_initial=out.is_initial)  # fmt: skip

    @torch.no_grad()
    def switch_prompt(self, stream: Stream, context: torch.Tensor, recache: str = "none") -> bool:
        """A new prompt from the next block on; with `recache` ("window", "blocks") the resident blocks' K/V are
        re-written under it (the profiler's `recache` stage). Returns whether a re-cache ran."""
        with self.profiler.stage("recache") if recache != "none" else contextlib.nullcontext():
            return switch_prompt(self.pipeline, stream.state, context, recache, stream.history)

    @torch.no_grad()
    def recache(self, stream: Stream, style: str) -> bool:
        """Re-write the resident blocks' K/V under the prompt in force ("window" or "blocks"); whether one ran."""
        with self.profiler.stage("recache"):
            return recache_resident(self.pipeline, stream.state, style, stream.history)

    @torch.no_grad()
    def settle(self, stream: Stream) -> None:
        """Run the last block's pending context pass (its K/V written), if any."""
        self.pipeline.settle(stream.state)

    # -- a finite run ------------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, stream: Stream, request: GenerationRequest, hooks: GenerationHooks | None = None) -> VideoResult:
        """The request's given frames then its blocks through `step`, each decoded and at the sinks as soon as it
        is clean; the last block's context pass only with `request.final_context_pass`. The sinks are closed at
        the end, also on an interrupt or error."""
        hooks = hooks or GenerationHooks()
        inputs = RequestInputs(self.pipeline, request)
        hooks.on_start(request.num_blocks)
        latents, frames, block_seconds = [], [], []

        def keep(block: EngineBlock) -> None:
            latents.append(block.latents)
            if block.frames is not None:
                frames.append(block.frames)
            block_seconds.append(block.denoise_s)

        try:
            for out, history in prime(self.pipeline, stream.state, request.initial_latents, inputs, stream.history):
                stream.history = history
                keep(self.emit(stream, out, hooks, commit=False))
            n = self.sampling.block_frames
            for index in range(request.num_blocks):
                keep(self.step(stream, inputs.block(index, stream.state.next_frame, n), hooks, commit=False))
            if request.final_context_pass:
                self.settle(stream)
        except KeyboardInterrupt as exc:
            raise GenerationInterruptedError("generation interrupted; the frames written so far are kept") from exc
        finally:
            self.close(stream)
        prof = self.profiler
        return VideoResult(
            latents=torch.cat(latents, dim=1),
            frames=np.concatenate(frames) if frames else None,
            fps=self.world_model.fps,
            seconds=time.perf_counter() - stream.t_open,
            block_seconds=block_seconds,
            first_frame_seconds=None if stream.first_frame_at is None else stream.first_frame_at - stream.t_open,
            profile=prof.report().to_dict() if isinstance(prof, Profiler) else None,
            files=tuple(str(sink.path) for sink in stream.sinks if getattr(sink, "path", None) is not None),
        )

    # -- between blocks --------------------------------------------------------------------------------
    @torch.no_grad()
    def capture(
        self, stream: Stream, *, extra: dict[str, Any] | None = None, extra_tensors: dict | None = None
    ) -> WorldState:
        """The world at this block boundary (CPU copies): cache, noise, decoder cache, resident blocks."""
        self.settle(stream)
        meta, hist = history_tensors(stream.history or [])
        extra = {"history": meta, "decoder_kind": self.decoder_kind if stream.decoder is not None else None,
                 **(extra or {})}  # fmt: skip
        return capture_world_state(
            self.pipeline, stream.state, identity=self.identity(), decoder=stream.decoder, extra=extra,
            extra_tensors={**hist, **(extra_tensors or {})},
        )  # fmt: skip

    def close(self, stream: Stream) -> None:
        """Close the stream's sinks (an Mp4Sink publishes its file) and end the profiler's run."""
        for sink in stream.sinks:
            sink.close()
        self.profiler.on_run_end()
