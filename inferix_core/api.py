"""One call from a prompt to streamed frames: what the CLI, the nodes and Python users call.

`generate_video` wires the pieces together: prompt → text conditioning, cache plan, the block loop,
streaming decode of each block as soon as it is clean, sinks, hooks and the profiler. It holds no
tensor math of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .cache import KVCacheConfig
from .engine import Engine, run_pipeline
from .engine.conditioning import actions_to_tensor, encode_prompt, encode_start_frames, latent_size
from .engine.image_world import (
    MatrixGameInputs,
    StartImageInputs,
    image_world_extra,
)
from .engine.run_inputs import (
    LONGLIVE2_SCENE_CUT_PREFIX,
    check_resumable,
    context_in_force,
    encode_run_prompt,
    is_image_run,
    resolve_inputs,
)
from .engine.run_output import (
    DecodedBlock,
    EncoderPixels,
    GenerationHooks,
    ProfiledHooks,
    VideoResult,
    choose_decoder,
    decode_to_sinks,
    decode_video,
    kv_cache_memory,
    kv_cache_numbers,
    open_video_sinks,
    pixels_to_uint8,
    profile_block_end,
)
from .engine.run_plan import check_plan, plan_run
from .engine.schedules import (
    ActionSchedule,
    PromptSchedule,
    block_at,
    block_timing,
    seconds_per_block,
    seconds_to_blocks,
)
from .engine.world_state import (
    WorldState,
)
from .errors import ConfigError
from .models.registry import WorldModel
from .pipeline import BlockOutput, GenerationRequest, SamplingConfig
from .profiling import NullProfiler

log = logging.getLogger(__name__)


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
            (`inferix_core.engine.image_world`). A Wan 2.1 I2V model (family wan21_i2v) takes the prompt (or a
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
        run = resolve_inputs(
            world_model, prompt, num_blocks=num_blocks, width=width, height=height, sampling=sampling,
            actions=actions, initial_latents=initial_latents, start_frames=start_frames,
            start_image=start_image, clip_vision=clip_vision, world_state=world_state,
        )  # fmt: skip
        if world_state is not None:
            num_initial = 0 if run.initial_latents is None else run.initial_latents.shape[1]
            check_resumable(world_model, world_state, num_initial, (run.lat_h, run.lat_w))
        engine = Engine(world_model, sampling, cache, decoder=decoder, decode=decode, profiler=prof)
        prof.on_run_start(_run_info(world_model, width, height, num_blocks, seed, sampling, cache))
        # 2. text conditioning (or an image model's CLIP tokens)
        with prof.stage("text_encode"):
            context, schedule = encode_run_prompt(world_model, prompt, run.image_inputs, entries=run.entries)
        # 3. a saved world to continue: its cache, noise, decoder cache and the blocks a re-cache re-runs
        resume_state, resume_history, actions_in, decoder_in = None, [], run.actions, None
        if world_state is not None:
            resume_state, decoder_in, resume_history = engine.resume(world_state)
            saved = world_state.tensors.get("extra.context")
            image_world = isinstance(run.image_inputs, MatrixGameInputs)  # its tokens were checked: no prompt switch
            if not image_world and (saved is None or not torch.equal(saved.to(context.device, context.dtype), context)):
                log.info("the resumed world continues under a new prompt from its block %d", world_state.next_block)
                schedule = [(0, context)] + [(b, c) for b, c in schedule if b != 0]
            if isinstance(actions_in, torch.Tensor):  # the pipeline reads actions at absolute frames
                pad = actions_in.new_zeros(actions_in.shape[0], resume_state.next_frame, actions_in.shape[2])
                actions_in = torch.cat([pad, actions_in], dim=1)
        style = world_model.switch_recache  # LongLive: theirs
        request = GenerationRequest(
            num_blocks=num_blocks,
            latent_height=run.lat_h,
            latent_width=run.lat_w,
            context=context,
            seed=seed,
            actions=actions_in,
            prompt_schedule=schedule,
            initial_latents=run.initial_latents,
            recache_on_switch=style in ("window", "window_reset"),
            recache_style=style or "window",
            clean_first_latents=run.clean_first,
            image_context=run.image_inputs.visual_context if isinstance(run.image_inputs, StartImageInputs) else None,
            shot_blocks=run.shots,
            resume_state=resume_state,
            resume_history=resume_history,
            keep_history=keep_world_state,
            final_context_pass=keep_world_state,  # only a kept world reads the last block's K/V
        )
        # 4. the stream: the request's cache and noise, a streaming decoder that keeps its causal cache across blocks
        stream = engine.open_request(request, sinks=sinks, decoder=decoder_in)
    except BaseException:
        for sink in sinks:  # sinks are ours to close even when we never start
            sink.close()
        raise
    # 5. the block loop
    result = engine.run(stream, request, hooks)
    if keep_world_state:
        extra, rows = {}, {}
        if isinstance(run.image_inputs, MatrixGameInputs):  # the action rows read so far, the start image's prints
            extra["image_world"], rows = image_world_extra(run.image_inputs, stream.state.next_frame)
        result.world_state = engine.capture(
            stream, extra=extra, extra_tensors={"context": context_in_force(context, schedule, num_blocks), **rows}
        )
    return result


__all__ = [
    "LONGLIVE2_SCENE_CUT_PREFIX",
    "ActionSchedule",
    "BlockOutput",
    "DecodedBlock",
    "EncoderPixels",
    "GenerationHooks",
    "ProfiledHooks",
    "PromptSchedule",
    "VideoResult",
    "WorldState",
    "actions_to_tensor",
    "block_at",
    "block_timing",
    "check_plan",
    "choose_decoder",
    "decode_to_sinks",
    "decode_video",
    "encode_prompt",
    "encode_run_prompt",
    "encode_start_frames",
    "generate_video",
    "is_image_run",
    "kv_cache_memory",
    "kv_cache_numbers",
    "latent_size",
    "open_video_sinks",
    "pixels_to_uint8",
    "plan_run",
    "profile_block_end",
    "run_pipeline",
    "seconds_per_block",
    "seconds_to_blocks",
]
