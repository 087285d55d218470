"""A run's inputs, decided once: the prompt (or an image-started model's start-image tokens), prompt and shot
schedules, start frames or a TI2V start latent, Matrix-Game / Wan 2.1 I2V image inputs and per-block actions, and
the checks a resumed world must pass."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..controls import ControlChannel
from ..errors import ConfigError
from ..models.registry import WorldModel
from ..pipeline import SamplingConfig
from .conditioning import actions_to_tensor, encode_prompt, encode_start_frames, latent_size
from .image_conditioning import resized_image_frames
from .image_world import (
    MatrixGameInputs,
    StartImageInputs,
    resume_image_world,
    start_image_role,
)
from .schedules import (
    SCENE_CUT_PREFIX,
    ActionSchedule,
    PromptSchedule,
    block_timing,
    shot_entries,
)
from .world_state import (
    WorldState,
)

log = logging.getLogger(__name__)


def actions_for_run(
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


def is_image_run(world_model: WorldModel, start_image: Any) -> bool:
    """Whether a run is steered by a start image and keyboard/mouse actions (Matrix-Game 2.0)."""
    return start_image_role(world_model, start_image) == "image_world"


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


@dataclass
class RunInputs:
    """What step 1 of generate_video resolves from its arguments, before any model work."""

    lat_h: int
    lat_w: int
    entries: list[tuple[int, str]]  # (block, prompt) of every prompt-schedule switch after the first
    shots: tuple[int, ...]  # LongLive 2.0: the blocks that start a new shot (pinned shot sink, RoPE offset)
    initial_latents: torch.Tensor | None  # given frames to continue from (B, F0, C, h, w)
    clean_first: torch.Tensor | None  # TI2V image start: the clean first latent of block 0
    image_inputs: MatrixGameInputs | StartImageInputs | None  # image-started models (Matrix-Game, Wan 2.1 I2V)
    actions: Any  # GenerationRequest.actions: a tensor, or a per-block callable of the image inputs


def start_latents(
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


def resolve_inputs(
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
) -> RunInputs:
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
    role = start_image_role(world_model, start_image)
    if role == "ti2v":  # the image is the clean first latent of block 0 (as one start frame)
        if start_frames is not None or initial_latents is not None:
            raise ConfigError("a TI2V model starts from one image or from start frames, not both")
        if clip_vision is not None:
            log.info("a TI2V model starts from the image's latent alone; the CLIP vision input is ignored")
        start_frames = resized_image_frames(start_image, height, width)
    initial_latents, clean_first = start_latents(world_model, start_frames, initial_latents, width, height, sampling)
    num_initial = 0 if initial_latents is None else initial_latents.shape[1]
    image_inputs = None
    if role == "prompt_and_image":  # Wan 2.1 I2V: prompt (schedules too) + start image, no actions
        if num_initial:
            raise ConfigError("a Wan 2.1 I2V model starts from its start image; it takes no start frames")
        if actions is not None:
            raise ConfigError("a Wan 2.1 I2V model takes no actions; drop the action schedule")
        image_inputs = StartImageInputs(world_model, start_image, width, height, clip_vision)
        per_block = image_inputs.for_block
    elif role == "image_world":
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
        per_block = actions_for_run(world_model, actions, num_blocks, num_initial, sampling)
    return RunInputs(lat_h, lat_w, entries, shots, initial_latents, clean_first, image_inputs, per_block)


def check_resumable(world_model: WorldModel, world: WorldState, num_initial: int, lat_hw) -> None:
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


def context_in_force(context: torch.Tensor, schedule: list, num_blocks: int) -> torch.Tensor:
    """The prompt embedding of the last block: the last switch at or before it, else the first prompt."""
    current = context
    for block, c in sorted(schedule, key=lambda bc: bc[0]):
        if block < num_blocks:
            current = c
    return current
