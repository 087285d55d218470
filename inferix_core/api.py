"""One call from a prompt to streamed frames: what the CLI, the nodes and Python users call.

`generate_video` wires the pieces together: prompt → text conditioning, cache plan, the block loop,
streaming decode of each block as soon as it is clean, sinks, hooks and the profiler. It holds no
tensor math of its own.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .cache import KVCacheConfig
from .errors import ConfigError, GenerationInterruptedError, ShapeMismatchError
from .models.registry import WorldModel
from .pipeline import BlockDiffusionPipeline, BlockOutput, GenerationRequest, PipelineHooks, SamplingConfig
from .profiling import NullProfiler, Profiler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptSchedule:
    """Prompt changes at given times: [(seconds, prompt), ...], the first at 0."""

    entries: tuple[tuple[float, str | torch.Tensor], ...]

    def __post_init__(self) -> None:
        times = [t for t, _ in self.entries]
        if not self.entries or times[0] != 0:
            raise ConfigError("a prompt schedule must start with a prompt at 0 seconds")
        if times != sorted(times) or len(set(times)) != len(times):
            raise ConfigError(f"prompt schedule times must be strictly increasing, got {times}")


@dataclass
class VideoResult:
    latents: torch.Tensor  # (B, F, C, h, w) normalised latents
    frames: np.ndarray | None  # (T, H, W, 3) uint8, batch item 0
    fps: int
    seconds: float
    block_seconds: list[float] = field(default_factory=list)
    first_frame_seconds: float | None = None
    profile: dict | None = None


class GenerationHooks:
    """Callbacks of generate_video (progress bars, previews, websocket events, interrupts)."""

    def on_start(self, num_blocks: int) -> None: ...

    def on_block_end(self, index: int, frames: np.ndarray | None, timings: dict) -> None: ...

    def check_interrupt(self) -> None: ...


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
    step = s * world_model.config.patch_size[1]
    if width % step or height % step:
        raise ConfigError(f"width and height must be multiples of {step}; got {width}x{height}")
    return height // s, width // s


def pixels_to_uint8(pixels: torch.Tensor) -> np.ndarray:
    """(B, 3, T, H, W) in [-1, 1] → (T, H, W, 3) uint8 of batch item 0."""
    x = ((pixels[0].float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(1, 2, 3, 0).cpu().numpy()


def kv_cache_numbers(cache) -> dict[str, float]:
    """The numeric part of `cache.stats()` (the profiler keeps numbers; 'kind' is a name)."""
    return {k: v for k, v in cache.stats().items() if isinstance(v, int | float) and not isinstance(v, bool)}


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
    actions: torch.Tensor | Sequence[str] | None = None,
    sinks: Iterable = (),
    hooks: GenerationHooks | None = None,
    decode: bool = True,
    decoder: str = "vae",
    profiler: NullProfiler | None = None,
    initial_latents: torch.Tensor | None = None,
) -> VideoResult:
    """Generate `num_blocks` blocks, decoding and streaming each block as soon as it is clean.

    With a `Profiler`, the run is timed from before text encoding to the last block's frames reaching the
    sinks; `VideoResult.profile` holds its report as a dict.
    """
    hooks = hooks or GenerationHooks()
    sampling = sampling or world_model.sampling
    cache = cache or world_model.default_cache
    sinks = list(sinks)
    prof = profiler if profiler is not None else NullProfiler()
    # 1. geometry and conditioning
    lat_h, lat_w = latent_size(world_model, width, height)
    num_frames = num_blocks * sampling.block_frames
    schedule: list[tuple[int, torch.Tensor]] = []
    prof.on_run_start({"family": world_model.family, "width": width, "height": height, "num_blocks": num_blocks,
                       "block_frames": sampling.block_frames, "steps": list(sampling.denoising_steps),
                       "window_frames": cache.window_frames, "sink_frames": cache.sink_frames, "seed": seed})
    stage = prof.stage
    with stage("text_encode"):
        if isinstance(prompt, PromptSchedule):
            frames_per_block_s = sampling.block_frames * world_model.temporal_compression / world_model.fps
            context = encode_prompt(world_model, prompt.entries[0][1])
            for t, p in prompt.entries[1:]:
                block = round(t / frames_per_block_s)
                if block >= num_blocks:
                    raise ConfigError(f"prompt at {t}s starts after the video ends ({num_blocks * frames_per_block_s:.1f}s)")
                schedule.append((max(block, 1), encode_prompt(world_model, p)))
        else:
            context = encode_prompt(world_model, prompt)
    request = GenerationRequest(
        num_blocks=num_blocks,
        latent_height=lat_h,
        latent_width=lat_w,
        context=context,
        seed=seed,
        actions=actions_to_tensor(world_model, actions, num_frames + (0 if initial_latents is None else initial_latents.shape[1])),
        prompt_schedule=schedule,
        initial_latents=initial_latents,
    )
    pipe = BlockDiffusionPipeline(world_model.transformer, sampling, cache)
    # 2. a streaming decoder that keeps its causal cache across blocks
    stream = None
    if decode:
        dec = world_model.preview_decoder if decoder == "preview" and world_model.preview_decoder else world_model.vae
        if dec is None:
            raise ConfigError("decode=True needs a VAE: pick a VAE file in LoadWorldModel, or set decode=False")
        stream = dec.stream_decoder()
    # 3. the block loop
    hooks.on_start(num_blocks)
    t_start = time.perf_counter()
    latents, frames, block_seconds, first_frame = [], [], [], None
    try:
        for out in pipe.stream(request, ProfiledHooks(prof, hooks)):
            latents.append(out.latents)
            pix = None
            if stream is not None:
                with stage("decode"):
                    t0 = time.perf_counter()
                    pixels = stream.decode(out.latents.permute(0, 2, 1, 3, 4))  # (B, 3, T, H, W)
                    pix = pixels_to_uint8(pixels)
                    decode_s = time.perf_counter() - t0
                if first_frame is None and len(pix):
                    first_frame = time.perf_counter() - t_start
                    prof.on_first_frame()
                with stage("sink"):
                    for sink in sinks:
                        sink.write(pix, out.index)
                frames.append(pix)
            else:
                decode_s = 0.0
            block_seconds.append(out.seconds)
            if not out.is_initial:  # given frames are context, not generated: the profiler never opened them
                prof.record_kv_cache(kv_cache_numbers(pipe.kv_cache))
                prof.on_block_end(out.index, 0 if pix is None else len(pix))
            hooks.on_block_end(out.index, pix, {"denoise_s": out.seconds, "decode_s": decode_s})
    except KeyboardInterrupt as exc:
        raise GenerationInterruptedError("generation interrupted; the frames written so far are kept") from exc
    finally:
        for sink in sinks:
            sink.close()
        prof.on_run_end()
    return VideoResult(
        latents=torch.cat(latents, dim=1),
        frames=np.concatenate(frames) if frames else None,
        fps=world_model.fps,
        seconds=time.perf_counter() - t_start,
        block_seconds=block_seconds,
        first_frame_seconds=first_frame,
        profile=prof.report().to_dict() if isinstance(prof, Profiler) else None,
    )


__all__ = [
    "BlockOutput", "GenerationHooks", "ProfiledHooks", "PromptSchedule", "VideoResult", "actions_to_tensor",
    "encode_prompt", "generate_video", "kv_cache_numbers", "latent_size", "pixels_to_uint8",
]  # fmt: skip
