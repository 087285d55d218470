"""The engine: one object that owns the block loop of a world model, for every client.

`Engine` holds the model's pipeline (sampling, cache settings, Krea's pixel window) and the run's decoder
choice and profiler. `open` / `resume` give a `Stream`: the pipeline's state (KV cache, prompt K/V, noise,
position), its streaming decoder, its sinks and the resident blocks a re-cache or a saved world needs.
`step` is the one per-block body (pipeline/loop.py `advance`: prompt switch, denoise, history; then decode,
sinks, profiler, hooks); `run` steps a finite request and returns a `VideoResult`; `switch_prompt`,
`capture` and `close` are what an open-ended stream needs between blocks. `fork` gives N futures of a stream
(pages shared copy-on-write, engine/forks.py) and `step_many` steps several streams as one batch per model call
(`pipeline.batched.denoise_many`), each decoded to its own sinks. `generate_video` (api.py), `InteractiveSession`,
`Branches` / `LiveBranch` and `MultiStreamEngine` (clients/) are thin clients of it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..cache import KVCacheConfig, MemoryPlan
from ..cache.shared import PageArena
from ..errors import ConfigError, GenerationInterruptedError, StreamStopped
from ..models.registry import WorldModel
from ..pipeline import BlockDiffusionPipeline, BlockOutput, GenerationRequest, SamplingConfig, SeededNoise
from ..pipeline.batched import denoise_many
from ..pipeline.frames import keep_resident
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
from ..pipeline.streams import adopt_stream, release_stream, start_stream
from ..profiling import NullProfiler, Profiler
from ..vae.pixel_window import PixelWindowEncoder
from .forks import Future, WindowPixels, check_forkable, decodes_in_loop, fork_decoder, fork_state
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
    inputs: RequestInputs | None = None  # a finite request's per-block inputs (open_request); None: given per step
    pixel_window: Any = None  # a Krea fork's own pixel window (keep_first_frame=False); None: the engine's
    stopped: str = ""  # why a sink stopped it (`StreamStopped` in step_many); "" while it goes on

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
        pipeline: a pipeline built by hand (tests, benchmarks, many-stream servers) instead of the model's; with
            no `world_model` the engine steps, forks and batches streams but plans, saves and runs no request.
        decoder_factory: makes each stream's decoder (`decode(latents (B, C, f, h, w)) -> pixels`) instead of
            the model's VAE; with a bare `pipeline`, None keeps latents only.
    """

    def __init__(
        self,
        world_model: WorldModel | None = None,
        sampling: SamplingConfig | None = None,
        cache: KVCacheConfig | None = None,
        *,
        decoder: str = "vae",
        decode: bool = True,
        profiler: NullProfiler | None = None,
        pipeline: BlockDiffusionPipeline | None = None,
        decoder_factory: Callable[[], Any] | None = None,
    ):
        if world_model is None and pipeline is None:
            raise ConfigError("an Engine needs a world model or a pipeline")
        self.world_model = world_model
        self.profiler = profiler if profiler is not None else NullProfiler()
        self.decoder_factory = decoder_factory
        if pipeline is not None:
            self.pipeline, self.sampling, self.cache_config = pipeline, pipeline.sampling, pipeline.cache_config
            self.first_frame_encoder = pipeline.first_frame_encoder
            self.decoder_kind = "custom" if decoder_factory is not None else decoder
            self.decode = decode and (decoder_factory is not None or world_model is not None)
            return
        self.sampling = sampling or world_model.sampling
        self.cache_config = cache or world_model.default_cache
        self.decoder_kind, self.decode = decoder, decode
        self.first_frame_encoder = first_frame_encoder_for(world_model, self.sampling)  # Krea's keep_first_frame=False
        self.pipeline = run_pipeline(world_model, self.sampling, self.cache_config, self.first_frame_encoder)

    def model(self) -> WorldModel:
        """The world model; an engine over a bare pipeline has none (plans, saved worlds, finite runs need one)."""
        if self.world_model is None:
            raise ConfigError("this engine runs a bare pipeline: planning, saving a world or a finite run needs "
                              "Engine(world_model)")  # fmt: skip
        return self.world_model

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
            self.model(), self.cache_config, width, height, num_blocks, self.sampling, num_initial_frames,
            available_bytes, streams=streams,
        )  # fmt: skip

    # -- streams -----------------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The model's identity a saved world is checked against (`world_state.model_identity`)."""
        return model_identity(self.model().transformer, self.model().family)

    def new_decoder(self, *, continues: bool = False):
        """A fresh streaming decoder (None with decode=False); `continues`: the stream continues given frames."""
        if not self.decode:
            return None
        if self.decoder_factory is not None:
            return self.decoder_factory()
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
        arena: PageArena | None = None,
    ) -> Stream:
        """An open-ended stream: a fresh cache (or pages in `arena`: forkable and batchable), the prompt's K/V,
        per-block noise from `seed` (or `noise`)."""
        noise = noise or SeededNoise(seed)
        if arena is not None:
            state = start_stream(self.pipeline, context, latent_height, latent_width, arena=arena, noise=noise,
                                 image_context=image_context)  # fmt: skip
        else:
            state = self.pipeline.start_stream(context, latent_height, latent_width, noise=noise,
                                               image_context=image_context)  # fmt: skip
        state.clean_prefix = clean_prefix
        return Stream(state, self.new_decoder(), list(sinks), [] if keep_history else None)

    def open_request(self, request: GenerationRequest, *, sinks: Iterable[Any] = (), decoder: Any = None) -> Stream:
        """A finite request's stream (noise drawn up front, the reference's order; or its `resume_state`).

        `decoder`: the stream decoder to use (a resumed world's, with its causal cache); default a fresh one."""
        t_open = time.perf_counter()  # a run's time counts its cache and prompt set-up
        state = open_request(self.pipeline, request)
        inputs = RequestInputs(self.pipeline, request)
        history = list(request.resume_history) if inputs.keeps_history else None
        if decoder is None:
            decoder = self.new_decoder(continues=request.initial_latents is not None)
        return Stream(state, decoder, list(sinks), history, t_open=t_open, inputs=inputs)

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
    def emit(
        self, stream: Stream, out: BlockOutput, hooks: GenerationHooks | None, *, commit: bool, split_first=True
    ) -> EngineBlock:
        """A made block to the decoder and sinks, then the profiler and hooks. `split_first`: a stream's first
        frame goes to the sinks alone (`decode_to_sinks`'s first_frame_alone); batched streams write whole blocks."""
        frames, decode_s = None, 0.0
        if stream.decoder is not None:
            frames, decode_s, ready_at = decode_to_sinks(
                stream.decoder, out.latents, out.index, stream.sinks, self.profiler, first_frame_alone=split_first
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

    # -- many streams ------------------------------------------------------------------------------------
    def adopt(self, stream: Stream, arena: PageArena | None = None) -> Stream:
        """The stream with its KV pages in a page arena (copied once from a plain cache; a stream already in one,
        or one whose cache Krea's recompute rebuilds every block, as it is), so it can fork and batch."""
        self.settle(stream)
        if self.sampling.kv_recompute_frames:
            return stream
        state = adopt_stream(self.pipeline, stream.state, arena)  # the same state when already in an arena
        if state is stream.state:
            return stream
        return Stream(state, stream.decoder, stream.sinks, stream.history, pixel_window=stream.pixel_window)

    def fork(self, stream: Stream, futures: Sequence[Future]) -> list[Stream]:
        """N futures of `stream` from its block boundary on (engine/forks.py), each a stream with the parent's
        pages mapped copy-on-write (the parent must live in an arena: `adopt`), or, with Krea's recompute, a
        fresh cache and a fork of the pixel window; each decodes with a fork of the parent's decoder."""
        check_forkable(self.pipeline, stream.state)
        if not futures:
            raise ConfigError("branching needs at least one Future")
        parent = stream.state
        self.settle(stream)
        in_loop = decodes_in_loop(stream.decoder, self.pipeline)
        own = self.pipeline.first_frame_encoder  # the window in force (a kept fork's, after a branch)
        forks = []
        for future in futures:
            window = None if own is None else own.fork()
            if stream.decoder is None:
                decoder = None
            else:  # Krea's keep_first_frame=False shows the pixels its own window decoded in the loop
                decoder = WindowPixels(window) if in_loop else fork_decoder(stream.decoder)
            forks.append(Stream(fork_state(self.pipeline, parent, future), decoder, pixel_window=window))
        return forks

    @torch.no_grad()
    def step_many(
        self,
        streams: Sequence[Stream],
        blocks: Sequence[BlockInput] | None = None,
        hooks: GenerationHooks | None = None,
    ) -> list[EngineBlock]:
        """The next block of every stream as one batch per model call (`denoise_many`; Krea's recompute one
        stream after another, each with its own pixel window), then each decoded to its own sinks, whole. A
        sink that raises `StreamStopped` stops its stream alone (`Stream.stopped` says why)."""
        blocks = list(blocks) if blocks is not None else [BlockInput()] * len(streams)
        if len(blocks) != len(streams):
            raise ConfigError(f"{len(blocks)} block inputs for {len(streams)} streams")
        for stream, block in zip(streams, blocks, strict=True):
            if block.recache != "none" or block.new_shot:
                raise ConfigError("a re-cache or a new shot runs on one stream at a time (Engine.step)")
            self.settle(stream)
            if block.context is not None:
                self.pipeline.set_prompt(stream.state, block.context)
        windows = [s.pixel_window for s in streams] if self.sampling.kv_recompute_frames else None
        outs = denoise_many(self.pipeline, [s.state for s in streams], [b.action for b in blocks], None, windows)
        made = []
        for stream, block, out in zip(streams, blocks, outs, strict=True):
            if stream.history is not None:
                stream.history = keep_resident([*stream.history, (out.start_frame, out.latents, block.action)],
                                               stream.state)  # fmt: skip
            try:
                made.append(self.emit(stream, out, hooks, commit=True, split_first=False))
            except StreamStopped as exc:
                stream.stopped = str(exc) or "stopped by its sink"
                made.append(EngineBlock(out.index, out.start_frame, out.latents, None, out.seconds, 0.0))
        return made

    def release(self, stream: Stream) -> None:
        """Give a stream's arena pages back (a fork not kept, a stopped stream); its sinks stay open."""
        release_stream(stream.state)

    # -- a finite run ------------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, stream: Stream, request: GenerationRequest, hooks: GenerationHooks | None = None) -> VideoResult:
        """The request's given frames then its blocks through `step`, each decoded and at the sinks as soon as it
        is clean; the last block's context pass only with `request.final_context_pass`. The sinks are closed at
        the end, also on an interrupt or error."""
        hooks = hooks or GenerationHooks()
        if stream.inputs is None or stream.inputs.request is not request:
            raise ConfigError("Engine.run takes the stream Engine.open_request opened for the same request")
        inputs = stream.inputs
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
            fps=self.model().fps,
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
