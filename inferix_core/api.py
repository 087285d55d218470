"""One call from a prompt to streamed frames: what the CLI, the nodes and Python users call.

`generate_video` wires the pieces together: prompt → text conditioning, cache plan, the block loop,
streaming decode of each block as soon as it is clean, sinks, hooks and the profiler. It holds no
tensor math of its own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .cache import KVCacheConfig, MemoryPlan, plan_memory
from .conditioning import actions_to_tensor, encode_prompt, encode_start_frames, latent_size
from .controls import ControlChannel
from .errors import CacheBudgetError, ConfigError, GenerationInterruptedError, ShapeMismatchError
from .image_world import (
    MatrixGameInputs,
    StartImageInputs,
    image_world_extra,
    resume_image_world,
    takes_prompt_and_image,
    takes_start_image,
)
from .models.registry import RECACHE_STYLE_BY_FAMILY, WorldModel
from .pipeline import BlockDiffusionPipeline, BlockOutput, GenerationRequest, PipelineHooks, SamplingConfig
from .profiling import NullProfiler, Profiler
from .schedules import (
    SCENE_CUT_PREFIX,
    ActionSchedule,
    PromptSchedule,
    block_at,
    block_timing,
    seconds_per_block,
    seconds_to_blocks,
    shot_entries,
)
from .vae.overlap import to_uint8_frames
from .vae.pixel_window import PixelWindowEncoder
from .vae.streaming import StreamDecoder
from .vae.taehv import TAEHVStreamDecoder
from .vae.tiny_ae import TinyStreamDecoder
from .world_state import (
    WorldState,
    capture_world_state,
    history_from,
    history_tensors,
    load_world_state,
    model_identity,
)

log = logging.getLogger(__name__)


@dataclass
class VideoResult:
    latents: torch.Tensor  # (B, F, C, h, w) normalised latents
    frames: np.ndarray | None  # (T, H, W, 3) uint8, batch item 0
    fps: int
    seconds: float
    block_seconds: list[float] = field(default_factory=list)
    first_frame_seconds: float | None = None
    profile: dict | None = None
    files: tuple[str, ...] = ()  # what the sinks published (final names), e.g. the streamed mp4
    world_state: WorldState | None = None  # the world after the last block (keep_world_state=True)


class GenerationHooks:
    """Callbacks of generate_video and decode_video (progress bars, previews, websocket events, interrupts).

    `on_block_end` timings hold seconds (`denoise_s`, `decode_s`) and, for generation, the KV cache's
    bytes after the block (`kv_gpu_bytes`, `kv_host_bytes`), so a live panel can show memory per block.
    """

    def on_start(self, num_blocks: int) -> None: ...

    def on_block_end(self, index: int, frames: np.ndarray | None, timings: dict) -> None: ...

    def check_interrupt(self) -> None: ...


def pixels_to_uint8(pixels: torch.Tensor) -> np.ndarray:
    """(B, 3, T, H, W) in [-1, 1] → (T, H, W, 3) uint8 of batch item 0."""
    return to_uint8_frames(pixels).cpu().numpy()


def kv_cache_numbers(cache) -> dict[str, float]:
    """The numeric part of `cache.stats()` (the profiler keeps numbers; 'kind' is a name)."""
    return {k: v for k, v in cache.stats().items() if isinstance(v, int | float) and not isinstance(v, bool)}


def kv_cache_memory(cache) -> dict[str, float]:
    """Bytes the KV cache holds now, under the names the live panel reads (GPU-resident and offloaded)."""
    stats = cache.stats()
    return {
        "kv_gpu_bytes": float(stats.get("resident_bytes", 0)),
        "kv_host_bytes": float(stats.get("offloaded_bytes", 0)),
    }


def decode_video(
    world_model: WorldModel,
    latents: torch.Tensor,
    hooks: GenerationHooks | None = None,
    *,
    block_frames: int | None = None,
    decoder: str = "vae",
) -> np.ndarray:
    """Decode latents (B, F, C, h, w) block by block with the streaming decoder; uint8 (T, H, W, 3) of item 0.

    Memory stays flat for long videos (one block of pixels at a time) and the result equals a full
    decode. `block_frames` (default: the family's) only changes progress granularity and peak memory.
    """
    hooks = hooks or GenerationHooks()
    dec = choose_decoder(world_model, decoder)
    if latents.ndim != 5:
        raise ShapeMismatchError(f"latents must be (B, F, C, h, w), got {list(latents.shape)}")
    step = block_frames or world_model.sampling.block_frames
    num_blocks = -(-latents.shape[1] // step)
    param = next(dec.parameters())
    stream, blocks = dec.stream_decoder(), []
    hooks.on_start(num_blocks)
    for index in range(num_blocks):
        t0 = time.perf_counter()
        chunk = latents[:, index * step : (index + 1) * step].permute(0, 2, 1, 3, 4)  # (B, C, f, h, w)
        blocks.append(pixels_to_uint8(stream.decode(chunk.to(param.device, param.dtype))))  # (T, H, W, 3)
        hooks.on_block_end(index, blocks[-1], {"decode_s": time.perf_counter() - t0})
        hooks.check_interrupt()
    return np.concatenate(blocks)


def first_frame_encoder_for(world_model: WorldModel, sampling: SamplingConfig) -> PixelWindowEncoder | None:
    """The VAE in the block loop that Krea's `keep_first_frame=False` needs (None when the run keeps the first frame).

    Refuses, with the fix, a run that would re-encode but has no Wan 2.1 VAE (no silent keep-first fallback).
    """
    if not sampling.kv_recompute_frames or sampling.keep_first_frame:
        return None
    return PixelWindowEncoder(world_model.vae, sampling.kv_recompute_frames)


def plan_run(
    world_model: WorldModel,
    cache: KVCacheConfig | None,
    width: int,
    height: int,
    num_blocks: int,
    sampling: SamplingConfig | None = None,
    num_initial_frames: int = 0,
    available_bytes: int | None = None,
) -> MemoryPlan:
    """The memory plan of one run, with `cache.gpu_budget_bytes` as the KV cache's share of the GPU.

    The planner's budget covers the whole run (weights, activations, VAE, cache); the cache config's
    budget is the cache alone, so the run budget is the rest plus that share. Without one, the budget is
    what the device has free now (CUDA) plus the weights already loaded there; on the CPU the whole plan
    is host memory. Either way the decoded frames the run keeps (uint8, in host RAM) are counted against
    the RAM available (`available_bytes`, default: MemAvailable). `check_plan` refuses what does not fit,
    before anything is allocated, naming the cheapest fix. Allocates nothing.
    """
    from .cache.planner import available_memory_bytes, check_host_memory, host_available_bytes

    sampling = sampling or world_model.sampling
    cache = cache or world_model.default_cache
    lat_h, lat_w = latent_size(world_model, width, height)
    args = dict(
        model_config=world_model.config,
        latent_h=lat_h,
        latent_w=lat_w,
        cache_config=cache,
        dtype=world_model.dtype,
        vae_dim=getattr(getattr(world_model.vae, "config", None), "dim", 96),
        block_frames=sampling.block_frames,
        max_frames=num_initial_frames + num_blocks * sampling.block_frames,
        **_decoder_memory(world_model.vae, lat_h, lat_w, sampling.block_frames),
    )
    plan = plan_memory(**args)
    on_cuda = world_model.device.type == "cuda"
    if cache.gpu_budget_bytes is not None:
        own = plan.decode.slicing if plan.decode is not None else None  # the cache's share is what is asked
        plan = plan_memory(**args, budget_bytes=plan.fixed_bytes + cache.gpu_budget_bytes, decode_slicing=own)
    elif on_cuda:  # no budget given: what the GPU has free, plus the weights already there
        free, source = available_memory_bytes(world_model.device)
        plan = plan_memory(**args, budget_bytes=free + _resident_bytes(world_model))
        plan.budget_source = source
    plan.device_type = world_model.device.type  # the plan's text says where its totals live
    host_free = host_available_bytes() if available_bytes is None else available_bytes
    cost = plan.chosen_cache or plan.requested_cache
    # on the CPU everything is host memory (the loaded weights are already out of MemAvailable)
    other = cost.host_bytes if on_cuda else max(0, plan.total_bytes - _resident_bytes(world_model))
    tc = world_model.temporal_compression
    check_host_memory(
        plan,
        frame_bytes=width * height * 3,
        frames_for_blocks=lambda n: 1 + tc * (n * sampling.block_frames - 1) if n > 0 else 0,
        num_blocks=num_blocks,
        other_bytes=other,
        available_bytes=host_free,
    )
    return plan


def _resident_bytes(world_model: WorldModel) -> int:
    """Bytes of the transformer and VAE weights already on the model's device (the plan counts them; the
    free memory measured now does not)."""
    kind = world_model.device.type
    graphs = getattr(world_model.transformer, "cuda_graphs", None)  # its KV cache, held for the next run to reuse
    total = graphs.held_cache_bytes() if graphs is not None else 0
    for module in (world_model.transformer, world_model.vae):
        if module is not None and hasattr(module, "parameters"):
            total += sum(p.numel() * p.element_size() for p in module.parameters() if p.device.type == kind)
    return total


def _decoder_memory(vae, lat_h: int, lat_w: int, block_frames: int) -> dict:
    """The planner's arguments for the model's own decoder: a Wan 2.1 VAE's counted memory model (so the
    plan may slice its decode), another decoder's weights + working set; nothing (the Wan estimate) without one."""
    from .vae import Wan22VAE, WanVAE
    from .vae.memory import VAEMemory

    if isinstance(vae, WanVAE) and not isinstance(vae, Wan22VAE):
        return {"vae_memory": VAEMemory.for_vae(vae, lat_h, lat_w)}
    if vae is None or not hasattr(vae, "decode_working_set_bytes"):
        return {}
    weights = sum(p.numel() * p.element_size() for p in vae.parameters())
    return {"vae_bytes": weights + vae.decode_working_set_bytes(lat_h, lat_w, block_frames)}


def check_plan(plan: MemoryPlan, world_model: WorldModel | None = None) -> KVCacheConfig:
    """The requested cache config if it fits its budget; else CacheBudgetError with the planner's advice.

    Stricter than `plan.check()`, which accepts a substitute (offload, int8, a shorter window): we never
    change the user's cache settings behind their back, we tell them which change fits. With
    `world_model`, its Wan VAE decodes as planned (a smaller decode slicing gives the same frames).
    """
    chosen = plan.check()  # also refuses when the frames kept do not fit host memory
    if chosen != plan.requested:
        raise CacheBudgetError(plan.message)
    vae = getattr(world_model, "vae", None)
    slicing = plan.decode.slicing if plan.decode is not None else None
    if slicing is not None and getattr(vae, "stream_slicing", slicing) != slicing:
        log.info("the VAE decodes %s, as planned for the budget", slicing.describe(plan.block_frames))
        vae.stream_slicing = slicing
    return chosen


def open_video_sinks(folder: str | Path, prefix: str, fps: float, *, crf: int = 18, frames_ext: str = "none") -> list:
    """An Mp4Sink at the next free `folder/prefix_NNNNN.mp4`, plus a frame folder of that name if asked.

    The mp4 is written as `…partial.mp4`, one flushed fragment per block, and renamed when closed (also on
    an interrupt), never over an existing file; so a stopped run leaves a playable file of the frames so far.
    """
    from .sinks import Mp4Sink, unique_path
    from .sinks.frames import FrameFolderSink

    path = unique_path(folder, prefix, "mp4")
    sinks = [Mp4Sink(path, fps, crf=crf)]
    if frames_ext != "none":
        sinks.append(FrameFolderSink(Path(folder) / path.stem, prefix="frame", ext=frames_ext))
    return sinks


class ProfiledHooks(PipelineHooks):
    """Pipeline hooks that feed a Profiler: block start, and the `denoise` / `context_pass` stages.

    The block's end is not here: the caller closes it after decoding and the sinks, so a block's wall
    time covers everything until its frames are out (what FPS should count). Shared with session.py.
    """

    def __init__(self, profiler: NullProfiler, hooks: GenerationHooks | None = None):
        self.profiler, self.hooks = profiler, hooks or GenerationHooks()

    def on_block_start(self, index: int, start_frame: int) -> None:
        self.profiler.on_block_start(index)

    def stage(self, name: str) -> contextlib.AbstractContextManager:
        return self.profiler.stage(name)

    def check_interrupt(self) -> None:
        self.hooks.check_interrupt()


def _actions_for_run(
    world_model: WorldModel, actions, num_blocks: int, num_initial: int, sampling: SamplingConfig
) -> torch.Tensor | None:
    """(1, F0 + F, A) actions: a schedule or a per-block name list covers its blocks; given frames take the first."""
    if isinstance(actions, ActionSchedule):
        actions = actions.per_block(world_model, num_blocks, sampling)
    if actions is not None and not isinstance(actions, torch.Tensor) and num_initial:
        names = list(actions)
        if len(names) == num_blocks:  # per block → per frame, so the given frames do not shift them
            names = [a for a in names for _ in range(sampling.block_frames)]
        actions = names[:1] * num_initial + names
    return actions_to_tensor(world_model, actions, num_initial + num_blocks * sampling.block_frames)


# LongLive 2.0's scene-cut prefix (kept under this name for callers of the API)
LONGLIVE2_SCENE_CUT_PREFIX = SCENE_CUT_PREFIX


def choose_decoder(world_model: Any, decoder: str = "vae") -> Any:
    """The module a run decodes with: the preview decoder (TAEHV) when asked for and loaded, else the VAE.

    The one place this choice is made (generate_video, decode_video, InteractiveSession). Asking for the
    preview when none is loaded decodes with the VAE and says so in the log; no VAE is a ConfigError.
    """
    if decoder == "preview":
        if world_model.preview_decoder is not None:
            return world_model.preview_decoder
        log.info("no preview decoder is loaded; decoding with the VAE")
    if world_model.vae is None:
        raise ConfigError(
            "decoding needs a VAE: pick a VAE file in Inferix Load World Model (or generate with decode=False)"
        )
    return world_model.vae


def run_pipeline(
    world_model: WorldModel,
    sampling: SamplingConfig | None = None,
    cache: KVCacheConfig | None = None,
    first_frame_encoder: PixelWindowEncoder | None = None,
) -> BlockDiffusionPipeline:
    """The block pipeline of one run (generate_video, InteractiveSession): the model's sampling and cache
    unless others are given; Krea's re-encoding VAE in the loop when the run needs it."""
    return BlockDiffusionPipeline(
        world_model.transformer,
        sampling or world_model.sampling,
        cache or world_model.default_cache,
        first_frame_encoder=first_frame_encoder,
    )


class EncoderPixels:
    """A stream decoder that hands on the pixels Krea's first-frame encoder decoded inside the block.

    Krea's `keep_first_frame=False` decodes every block in the loop (with Krea's decoder) to re-encode its
    first frame; showing those pixels decodes each block once, and shows what Krea's server shows.
    """

    def __init__(self, encoder: PixelWindowEncoder) -> None:
        self.encoder = encoder

    def decode(self, latents: torch.Tensor) -> torch.Tensor:  # decoded already, in the loop
        return self.encoder.last_pixels


def run_stream_decoder(
    world_model: WorldModel, decoder: str, first_frame_encoder: PixelWindowEncoder | None, *, continues: bool = False
):
    """The stream decoder of a run: the loop's own pixels when Krea's re-encode already decodes every
    block with the VAE (and the run does not continue given frames), else a fresh stream of `choose_decoder`."""
    dec = choose_decoder(world_model, decoder)
    if first_frame_encoder is not None and dec is world_model.vae and not continues:
        return EncoderPixels(first_frame_encoder)
    return dec.stream_decoder()


def is_image_run(world_model: WorldModel, start_image: Any) -> bool:
    """Whether a run is steered by a start image and keyboard/mouse actions (Matrix-Game 2.0)."""
    return start_image is not None or takes_start_image(world_model)


def encode_run_prompt(
    world_model: WorldModel,
    prompt: str | torch.Tensor | PromptSchedule,
    image_inputs: MatrixGameInputs | StartImageInputs | None,
    encode: Callable[[str], torch.Tensor] | None = None,
    *,
    entries: Sequence[tuple[int, str]] = (),
) -> tuple[torch.Tensor, list[tuple[int, torch.Tensor]]]:
    """A run's conditioning (context, [(block, context)] of the prompt switches).

    An image-started model's start-image CLIP tokens take the place of text (its prompt is ignored, with
    a log line). Otherwise the prompt is encoded: text by `encode` (default `encode_prompt`), an embedding
    as it is, a schedule's first prompt now and each (block, prompt) of `entries` for its switch.
    """
    if isinstance(image_inputs, MatrixGameInputs):
        if isinstance(prompt, torch.Tensor) or prompt:
            log.info("this model is steered by its start image and actions; the prompt text is ignored")
        return image_inputs.visual_context, []
    text = encode or functools.partial(encode_prompt, world_model)
    if isinstance(prompt, PromptSchedule):
        return text(prompt.entries[0][1]), [(b, text(p)) for b, p in entries]
    if isinstance(prompt, torch.Tensor):
        return encode_prompt(world_model, prompt), []
    return text(prompt), []


class DecodedBlock(NamedTuple):
    frames: np.ndarray  # (T, H, W, 3) uint8, batch item 0
    decode_s: float
    ready_at: float  # perf_counter() when the block's first frames were decoded (before the sinks got them)


# Stream decoders whose outputs concatenate to the same frames for any chunking of the latents (each says
# so in its docstring and its streaming tests): a block's first latent frame may be decoded on its own.
_CHUNK_EXACT_DECODERS = (StreamDecoder, TinyStreamDecoder, TAEHVStreamDecoder)


def _starts_its_stream(stream) -> bool:
    """Whether a chunk-exact stream decoder has decoded nothing yet (a new world, not a resumed or forked one).

    Only such a stream's first block is split: the frames are equal up to float rounding, not bitwise, so a
    resumed world (whose decoder goes on from saved state) decodes its blocks whole, exactly as the
    uninterrupted run decoded them there.
    """
    if not isinstance(stream, _CHUNK_EXACT_DECODERS):
        return False
    state = stream.state
    if isinstance(stream, TAEHVStreamDecoder):
        return state.frames_out == 0 and not state.memory
    return state.latent_frames_in == 0


def decode_to_sinks(
    stream,
    latents: torch.Tensor,
    index: int,
    sinks: Sequence,
    profiler: NullProfiler,
    *,
    first_frame_alone: bool = False,
) -> DecodedBlock:
    """Decode one clean block (B, n, C, h, w) with a run's stream decoder and hand its frames to every sink.

    Timed as the profiler's `decode` and `sink` stages; the sinks have the frames (on disk for an Mp4Sink)
    before this returns, so before the block is reported done. Shared by generate_video and the session.
    With `first_frame_alone` (a run's first decoded block) and a chunk-exact decoder that starts its stream
    (`_starts_its_stream`), the first latent frame is decoded and handed to the sinks on its own before the
    rest of the block: the viewer sees the first frame one block-decode earlier, and the frames are the same
    up to float rounding (the sinks get the block in two writes).
    """
    split = first_frame_alone and latents.shape[1] > 1 and _starts_its_stream(stream)
    parts = (latents[:, :1], latents[:, 1:]) if split else (latents,)
    decoded, decode_s, first_ready = [], 0.0, None
    for part in parts:
        with profiler.stage("decode"):
            t0 = time.perf_counter()
            frames = pixels_to_uint8(stream.decode(part.permute(0, 2, 1, 3, 4)))  # (B, 3, T, H, W) → uint8
            ready_at = time.perf_counter()
            decode_s += ready_at - t0
        if len(frames):
            profiler.on_first_frame()  # the profiler keeps the first call only
            first_ready = ready_at if first_ready is None else first_ready
        with profiler.stage("sink"):
            for sink in sinks:
                sink.write(frames, index)
        decoded.append(frames)
    frames = decoded[0] if len(decoded) == 1 else np.concatenate(decoded)
    return DecodedBlock(frames, decode_s, ready_at if first_ready is None else first_ready)


def profile_block_end(profiler: NullProfiler, cache, index: int, frames: np.ndarray | None) -> None:
    """Close a generated block in the profiler, with the KV cache's numbers after it."""
    profiler.record_kv_cache(kv_cache_numbers(cache))
    profiler.on_block_end(index, 0 if frames is None else len(frames))


@dataclass
class _RunInputs:
    """What step 1 of generate_video resolves from its arguments, before any model work."""

    lat_h: int
    lat_w: int
    entries: list[tuple[int, str]]  # (block, prompt) of every prompt-schedule switch after the first
    shots: tuple[int, ...]  # LongLive 2.0: the blocks that start a new shot (pinned shot sink, RoPE offset)
    initial_latents: torch.Tensor | None  # given frames to continue from (B, F0, C, h, w)
    clean_first: torch.Tensor | None  # TI2V image start: the clean first latent of block 0
    image_inputs: MatrixGameInputs | StartImageInputs | None  # image-started models (Matrix-Game, Wan 2.1 I2V)
    actions: Any  # GenerationRequest.actions: a tensor, or a per-block callable of the image inputs


def _start_latents(
    world_model: WorldModel, start_frames, initial_latents, width: int, height: int, sampling: SamplingConfig
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(initial_latents, clean_first): given frames encoded as context, or a TI2V model's one image as the
    clean first latent of block 0 (Wan 2.2 TI2V / LongLive 2.0 image start)."""
    if start_frames is None:
        return initial_latents, None
    if initial_latents is not None:
        raise ConfigError("pass start_frames or initial_latents, not both")
    if world_model.config.model_type == "ti2v" and len(start_frames) == 1:
        one = SamplingConfig(sampling.denoising_steps, block_frames=1, solver=sampling.solver, shift=sampling.shift)
        return None, encode_start_frames(world_model, start_frames, width, height, one)
    return encode_start_frames(world_model, start_frames, width, height, sampling), None


def _resolve_inputs(
    world_model: WorldModel,
    prompt,
    *,
    num_blocks: int,
    width: int,
    height: int,
    sampling: SamplingConfig,
    actions,
    initial_latents,
    start_frames,
    start_image,
    clip_vision,
    world_state: WorldState | None = None,
) -> _RunInputs:
    """Step 1: geometry, schedules, start frames and actions; everything that can fail on settings fails here.

    With `world_state` an image-started (Matrix-Game) run checks its start image against the saved world's and
    continues the saved action track with `actions` (the rest of the track, `MatrixGameInputs.fill`).
    """
    lat_h, lat_w = latent_size(world_model, width, height)
    timing = block_timing(world_model, sampling)
    switches = prompt.switch_blocks(num_blocks, timing) if isinstance(prompt, PromptSchedule) else []
    entries = list(zip(switches, [p for _, p in prompt.entries[1:]])) if switches else []
    shots: tuple[int, ...] = ()
    if sampling.shot_sinks or sampling.shot_rope_offset:  # LongLive 2.0: prefixed prompts start shots
        entries, shots = shot_entries(entries, num_blocks)
    initial_latents, clean_first = _start_latents(world_model, start_frames, initial_latents, width, height, sampling)
    num_initial = 0 if initial_latents is None else initial_latents.shape[1]
    image_inputs = None
    if takes_prompt_and_image(world_model):  # Wan 2.1 I2V: prompt (schedules too) + start image, no actions
        if num_initial:
            raise ConfigError("a Wan 2.1 I2V model starts from its start image; it takes no start frames")
        if actions is not None:
            raise ConfigError("a Wan 2.1 I2V model takes no actions; drop the action schedule")
        image_inputs = StartImageInputs(world_model, start_image, width, height, clip_vision)
        per_block = image_inputs.for_block
    elif is_image_run(world_model, start_image):
        if num_initial or isinstance(prompt, PromptSchedule):
            raise ConfigError("an image-started model takes neither start frames nor a prompt schedule")
        image_inputs = MatrixGameInputs(world_model, start_image, width, height, clip_vision)
        start_block = 0
        if world_state is not None:  # the saved rows first, after checking the image is the world's
            resume_image_world(image_inputs, world_state)
            start_block = world_state.next_block
        image_inputs.fill(actions, num_blocks, sampling.block_frames, timing, start_block=start_block)
        # (start, n) → MatrixGameBlockInput, read by every call of the block
        per_block = (
            functools.partial(image_inputs.live_block, actions)
            if isinstance(actions, ControlChannel)
            else image_inputs.for_block
        )
    else:
        per_block = _actions_for_run(world_model, actions, num_blocks, num_initial, sampling)
    return _RunInputs(lat_h, lat_w, entries, shots, initial_latents, clean_first, image_inputs, per_block)


def _run_info(world_model: WorldModel, width: int, height: int, num_blocks: int, seed: int, sampling, cache) -> dict:
    """What the profiler records of a generate_video run."""
    return {
        "family": world_model.family,
        "width": width,
        "height": height,
        "num_blocks": num_blocks,
        "block_frames": sampling.block_frames,
        "steps": list(sampling.denoising_steps),
        "window_frames": cache.window_frames,
        "sink_frames": cache.sink_frames,
        "seed": seed,
    }


def _run_blocks(
    pipe: BlockDiffusionPipeline,
    request: GenerationRequest,
    stream,
    sinks: list,
    hooks: GenerationHooks,
    prof: NullProfiler,
    fps: int,
) -> VideoResult:
    """Step 4: the block loop; each block decoded and at the sinks as soon as it is clean; sinks closed at the end."""
    hooks.on_start(request.num_blocks)
    t_start = time.perf_counter()
    latents, frames, block_seconds, first_frame = [], [], [], None
    try:
        for out in pipe.stream(request, ProfiledHooks(prof, hooks)):
            latents.append(out.latents)
            pix, decode_s = None, 0.0
            if stream is not None:
                pix, decode_s, ready_at = decode_to_sinks(
                    stream, out.latents, out.index, sinks, prof, first_frame_alone=first_frame is None
                )
                if first_frame is None and len(pix):
                    first_frame = ready_at - t_start
                frames.append(pix)
            block_seconds.append(out.seconds)
            if not out.is_initial:  # given frames are context, not generated: the profiler never opened them
                profile_block_end(prof, pipe.kv_cache, out.index, pix)
            hooks.on_block_end(
                out.index, pix, {"denoise_s": out.seconds, "decode_s": decode_s, **kv_cache_memory(pipe.kv_cache)}
            )
    except KeyboardInterrupt as exc:
        raise GenerationInterruptedError("generation interrupted; the frames written so far are kept") from exc
    finally:
        for sink in sinks:
            sink.close()
        prof.on_run_end()
    return VideoResult(
        latents=torch.cat(latents, dim=1),
        frames=np.concatenate(frames) if frames else None,
        fps=fps,
        seconds=time.perf_counter() - t_start,
        block_seconds=block_seconds,
        first_frame_seconds=first_frame,
        profile=prof.report().to_dict() if isinstance(prof, Profiler) else None,
        files=tuple(str(sink.path) for sink in sinks if getattr(sink, "path", None) is not None),
    )


def generate_video(
    world_model: WorldModel,
    prompt: str | torch.Tensor | PromptSchedule = "",
    *,
    num_blocks: int,
    width: int,
    height: int,
    seed: int = 0,
    cache: KVCacheConfig | None = None,
    sampling: SamplingConfig | None = None,
    actions: torch.Tensor | Sequence[str] | ActionSchedule | None = None,
    sinks: Iterable = (),
    hooks: GenerationHooks | None = None,
    decode: bool = True,
    decoder: str = "vae",
    profiler: NullProfiler | None = None,
    initial_latents: torch.Tensor | None = None,
    start_frames: np.ndarray | torch.Tensor | None = None,
    start_image: Any = None,
    clip_vision: Any = None,
    world_state: WorldState | None = None,
    keep_world_state: bool = False,
) -> VideoResult:
    """Generate `num_blocks` blocks, decoding and streaming each block as soon as it is clean.

    Args:
        actions: (F, A) tensor, action names (one per block or per latent frame) or an ActionSchedule.
        sinks: each gets every decoded block as it is produced and is closed at the end, also on an
            interrupt or error (an Mp4Sink then publishes the frames so far); `VideoResult.files` lists
            the final names of sinks that have a `path`.
        decoder: "vae", or "preview" for the model's preview decoder (`choose_decoder`).
        start_frames: video frames [T, H, W, 3] to continue from (see `encode_start_frames` for the
            trim/pad rule); exclusive with `initial_latents`.
        start_image, clip_vision: for image-started keyboard/mouse models (Matrix-Game 2.0): the image
            the video starts from and its CLIP vision (encoder, file, CLIP_VISION_OUTPUT or tokens); the
            actions are then an ActionSchedule of keys/mouse, per-pixel-frame rows, or a
            `controls.ControlChannel` read at each block boundary (live control)
            (`inferix_core.image_world`). A Wan 2.1 I2V model (family wan21_i2v) takes the prompt (or a
            prompt schedule: the image's K/V stay) and the start image with its CLIP vision, no actions.
            Other models refuse an image.
            For a TI2V model (Wan 2.2, 48 latent channels)
            one image is held instead as the clean first latent of the first block (LongLive 2.0's image start).

        world_state: continue this saved world (`world_state.read_world_state` or a previous result's
            `world_state`) instead of starting one: its cache, noise and decoder continue bitwise; `seed`
            is unused; a `prompt` other than the world's is a prompt switch at the first new block.
            Needs the world's model, size, sampling and cache settings (refused otherwise, naming them).
        keep_world_state: capture the world after the last block into `VideoResult.world_state`.

    With a `Profiler`, the run is timed from before text encoding to the last block's frames reaching the
    sinks; `VideoResult.profile` holds its report as a dict.
    """
    hooks = hooks or GenerationHooks()
    sampling = sampling or world_model.sampling
    cache = cache or world_model.default_cache
    sinks = list(sinks)
    prof = profiler if profiler is not None else NullProfiler()
    try:
        if world_state is not None and world_state.family != world_model.family:
            raise ConfigError(f"this world state is of a '{world_state.family}' model; load it with that model, not "
                              f"'{world_model.family}'")  # fmt: skip
        # 1. geometry, schedules, start frames, actions and the decoder: settings fail before any model work
        run = _resolve_inputs(
            world_model, prompt, num_blocks=num_blocks, width=width, height=height, sampling=sampling,
            actions=actions, initial_latents=initial_latents, start_frames=start_frames,
            start_image=start_image, clip_vision=clip_vision, world_state=world_state,
        )  # fmt: skip
        if world_state is not None:
            num_initial = 0 if run.initial_latents is None else run.initial_latents.shape[1]
            _check_resumable(world_model, world_state, num_initial, (run.lat_h, run.lat_w))
        first_frame_encoder = first_frame_encoder_for(world_model, sampling)  # Krea's keep_first_frame=False
        prof.on_run_start(_run_info(world_model, width, height, num_blocks, seed, sampling, cache))
        # 2. text conditioning (or an image model's CLIP tokens)
        with prof.stage("text_encode"):
            context, schedule = encode_run_prompt(world_model, prompt, run.image_inputs, entries=run.entries)
        pipe = run_pipeline(world_model, sampling, cache, first_frame_encoder)
        # 3. a streaming decoder that keeps its causal cache across blocks
        stream = (
            run_stream_decoder(world_model, decoder, first_frame_encoder, continues=run.initial_latents is not None)
            if decode
            else None
        )
        # 4. a saved world to continue: its cache, noise, decoder cache and the blocks a re-cache re-runs
        identity = (
            model_identity(world_model.transformer, world_model.family) if world_state or keep_world_state else None
        )
        resume_state, resume_history, actions_in = None, [], run.actions
        if world_state is not None:
            resume_state, stream = _resume(world_state, pipe, identity, stream, decoder)
            resume_history = history_from(world_state, pipe.device)
            saved = world_state.tensors.get("extra.context")
            image_world = isinstance(run.image_inputs, MatrixGameInputs)  # its tokens were checked: no prompt switch
            if not image_world and (saved is None or not torch.equal(saved.to(context.device, context.dtype), context)):
                log.info("the resumed world continues under a new prompt from its block %d", world_state.next_block)
                schedule = [(0, context)] + [(b, c) for b, c in schedule if b != 0]
            if isinstance(actions_in, torch.Tensor):  # the pipeline reads actions at absolute frames
                pad = actions_in.new_zeros(actions_in.shape[0], resume_state.next_frame, actions_in.shape[2])
                actions_in = torch.cat([pad, actions_in], dim=1)
        request = GenerationRequest(
            num_blocks=num_blocks,
            latent_height=run.lat_h,
            latent_width=run.lat_w,
            context=context,
            seed=seed,
            actions=actions_in,
            prompt_schedule=schedule,
            initial_latents=run.initial_latents,
            recache_on_switch=RECACHE_STYLE_BY_FAMILY.get(world_model.family) == "window",
            clean_first_latents=run.clean_first,
            image_context=run.image_inputs.visual_context if isinstance(run.image_inputs, StartImageInputs) else None,
            shot_blocks=run.shots,
            resume_state=resume_state,
            resume_history=resume_history,
            keep_history=keep_world_state,
            final_context_pass=keep_world_state,  # only a kept world reads the last block's K/V
        )
    except BaseException:
        for sink in sinks:  # sinks are ours to close even when we never start
            sink.close()
        raise
    # 5. the block loop
    result = _run_blocks(pipe, request, stream, sinks, hooks, prof, world_model.fps)
    if keep_world_state:
        meta, hist = history_tensors(pipe.stream_history)
        extra = {"history": meta, "decoder_kind": decoder if stream is not None else None}
        if isinstance(run.image_inputs, MatrixGameInputs):  # the action rows read so far, the start image's prints
            extra["image_world"], rows = image_world_extra(run.image_inputs, pipe.stream_state.next_frame)
            hist.update(rows)
        result.world_state = capture_world_state(
            pipe, pipe.stream_state, identity=identity, decoder=stream, extra=extra,
            extra_tensors={"context": _context_in_force(context, schedule, num_blocks), **hist},
        )  # fmt: skip
    return result


def _check_resumable(world_model: WorldModel, world: WorldState, num_initial: int, lat_hw) -> None:
    """One-line refusals of a resume that cannot continue the saved world (model checks: load_world_state)."""
    if world.family != world_model.family:
        raise ConfigError(f"this world state is of a '{world.family}' model; load it with that model, not "
                          f"'{world_model.family}'")  # fmt: skip
    if num_initial:
        raise ConfigError("a resumed world continues from its own frames; pass no start frames")
    saved = tuple(world.header["settings"]["latent_size"])
    if saved != tuple(lat_hw):
        raise ConfigError(
            f"this world state is {saved[1]}x{saved[0]} latents; set width and height to the saved world's "
            f"(here {lat_hw[1]}x{lat_hw[0]})"
        )


def _resume(world: WorldState, pipe: BlockDiffusionPipeline, identity: dict, stream, decoder: str):
    """The saved stream state, and the streaming decoder with its causal cache when the world has one."""
    saved_decoder = world.header["extra"].get("decoder_kind")
    if stream is not None and world.header.get("decoder") is not None and saved_decoder == decoder:
        return load_world_state(world, pipe, identity=identity, decoder=stream), stream
    if stream is not None:
        log.info("the world state has no %s decoder cache; decoding starts afresh (the first frames warm up)", decoder)
    return load_world_state(world, pipe, identity=identity), stream


def _context_in_force(context: torch.Tensor, schedule: list, num_blocks: int) -> torch.Tensor:
    """The prompt embedding of the last block: the last switch at or before it, else the first prompt."""
    current = context
    for block, c in sorted(schedule, key=lambda bc: bc[0]):
        if block < num_blocks:
            current = c
    return current


__all__ = [
    "ActionSchedule", "BlockOutput", "DecodedBlock", "GenerationHooks", "ProfiledHooks", "PromptSchedule",
    "VideoResult", "WorldState", "actions_to_tensor", "block_at", "check_plan", "choose_decoder", "decode_to_sinks",
    "decode_video", "encode_prompt", "encode_run_prompt", "encode_start_frames", "generate_video",
    "is_image_run", "kv_cache_memory", "kv_cache_numbers", "latent_size", "open_video_sinks", "pixels_to_uint8",
    "plan_run", "profile_block_end", "run_pipeline", "seconds_per_block", "seconds_to_blocks",
]  # fmt: skip
