"""InferixBlockDenoise: generate a video block by block with a world model; the pack's main node.

It converts ComfyUI types (text or CONDITIONING, IMAGE, widget strings) into the core's request, checks
the memory plan, and calls `inferix_core.api.generate_video` once; the block loop, cache, decoding,
schedules, start frames and timing live there. With Stream Settings connected it also hands the core an
mp4 sink in the output folder, so the file grows block by block while the node runs (ComfyUI runs a
downstream node only after this one finishes). A fresh KV cache is built every run, or the cache of a
world_state input is continued (a copy: the input is not modified); the world after the last block is
the world_state output (Save World State writes it). No input is modified.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
from typing import Any

from inferix_core.controls import control_spec_of
from inferix_core.engine.image_world import start_image_role

from . import comfy_runtime as rt
from . import live_controls, types
from .compat import io
from .core_interop import clip_vision_from_core, to_core_latent
from .core_video import core_video
from .stream_settings import split_prefix

log = logging.getLogger(__name__)

MAX_BLOCKS = 1000
MAX_SIZE = 4096
SIZE_STEP = 16  # the widgets' step (VAE stride 8 x patch 2, Wan 2.1); the loaded model's own is checked in execute


def size_hint(value: int, step: int) -> str:
    """The nearest sizes inside the limits that are multiples of `step`, nearest first: 'try 832 or 816'."""
    top = MAX_SIZE // step * step
    floor = value // step * step
    near = sorted({min(top, max(step, v)) for v in (floor, floor + step)}, key=lambda v: (abs(v - value), -v))
    return "try " + " or ".join(map(str, near))


def size_problem(
    width: int, height: int, num_blocks: int | None = None, seconds: float | None = None, world_model: Any = None
) -> str | None:
    """Why a frame size or length cannot run (a hint inside the limits), or None. With a world model, sizes are
    checked against its own multiple (`WorldModel.size_step`: 32 for Wan 2.2 / LongLive 2.0), not the widgets' 16."""
    step = SIZE_STEP if world_model is None else world_model.size_step
    for name, value in (("width", width), ("height", height)):
        if value % step or not step <= value <= MAX_SIZE:
            why = ""
            if world_model is not None:
                stride, patch = world_model.spatial_compression, world_model.config.patch_size[1]
                why = f" (this {world_model.family} model: VAE stride {stride} x patch {patch})"
            hint = size_hint(value, step)
            return f"{name} must be a multiple of {step}{why} between {step} and {MAX_SIZE}, got {value}; {hint}"
    if num_blocks is not None and not 1 <= num_blocks <= MAX_BLOCKS:
        return f"num_blocks must be between 1 and {MAX_BLOCKS}, got {num_blocks}"
    if seconds is not None and (not math.isfinite(seconds) or seconds < 0):
        return f"seconds must be 0 (use num_blocks) or a positive number, got {seconds}"
    return None


def frame_size_inputs() -> list:
    """The width and height widgets of every generating node (Block Denoise, Branch World)."""
    return [
        io.Int.Input(
            name,
            default=default,
            min=SIZE_STEP,
            max=MAX_SIZE,
            step=SIZE_STEP,
            tooltip=f"Frame {name} in pixels; a multiple of 16.",
        )
        for name, default in (("width", 832), ("height", 480))
    ]


MAX_TIMESTEP = 1000


def parse_steps(text: str) -> tuple[int, ...] | str:
    """'1000,750,500,250' → (1000, 750, 500, 250); '' → () (the family default); else an error string."""
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        steps = tuple(int(p) for p in parts)
    except ValueError:
        return f"denoising_steps must be comma-separated integers such as '1000,750,500,250', got '{text}'"
    if any(not 0 < s <= MAX_TIMESTEP for s in steps):
        return f"denoising_steps must lie in 1..{MAX_TIMESTEP}, got {list(steps)}"
    if any(a <= b for a, b in itertools.pairwise(steps)):
        return f"denoising_steps must decrease strictly (noisiest first), got {list(steps)}"
    return steps


def conditioning_tensor(conditioning: Any) -> Any:
    """The text embedding [B, L, D] inside a ComfyUI CONDITIONING list ([[tensor, {...}], ...])."""
    return conditioning[0][0]


def summarize(result: Any, width: int, height: int) -> str:
    """A line about a finished run (and the file it streamed to), shown on the node."""
    frames = 0 if result.frames is None else len(result.frames)
    first = "" if result.first_frame_seconds is None else f", first frame after {result.first_frame_seconds:.2f} s"
    line = (
        f"{len(result.block_seconds)} blocks, {frames} frames {width}x{height} at {result.fps} fps "
        f"in {result.seconds:.1f} s{first}"
    )
    return line + "".join(f"\nstreamed to {path}" for path in result.files)


WORLD_STATE_OUTPUT = 4  # index of the world_state output (latent, frames, video, core_video, world_state)


def output_linked(prompt: Any, node_id: Any, index: int) -> bool:
    """Whether any node of the queued prompt reads output `index` of node `node_id`.

    `prompt` is ComfyUI's DynamicPrompt (its original prompt is read) or the prompt dict itself (headless).
    The world is captured (its KV cache copied to the CPU) only when something uses it; without the
    prompt (a caller that passes no hidden inputs) it is captured to be safe.
    """
    getter = getattr(prompt, "get_original_prompt", None)
    if callable(getter):
        prompt = getter()
    if not isinstance(prompt, dict) or node_id is None:
        return True
    for node in prompt.values():
        inputs = node.get("inputs", {}) if isinstance(node, dict) else {}
        for value in inputs.values() if isinstance(inputs, dict) else ():
            if isinstance(value, list) and len(value) == 2 and str(value[0]) == str(node_id) and value[1] == index:
                return True
    return False


def image_clip_vision(clip_vision: Any, clip_vision_output: Any) -> Any:
    """The start image's CLIP source for the core: CLIP_VISION_OUTPUT tokens first, else a core CLIP_VISION."""
    if clip_vision_output is not None:
        return clip_vision_output
    return None if clip_vision is None else clip_vision_from_core(clip_vision)


def frames_to_image(frames: Any) -> Any:
    """uint8 [T, H, W, 3] (numpy or torch) → ComfyUI IMAGE float [T, H, W, 3] in 0..1."""
    import torch

    return torch.as_tensor(frames).float().div(255.0)


class InferixBlockDenoise(io.ComfyNode):
    """Generates latent blocks with a causal world model and decodes them as they finish."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixBlockDenoise",
            display_name="Inferix Block Denoise",
            category=f"{types.CATEGORY}/sampling",
            description="Autoregressive block diffusion: each block of latent frames is denoised in a few steps "
            "against a KV cache of the frames before it, then decoded. Shows every block live.",
            inputs=[
                types.WorldModel.Input("world_model", tooltip="The model from Inferix Load World Model."),
                io.String.Input(
                    "prompt",
                    multiline=True,
                    default="a car drives along a winding coastal road",
                    tooltip="Text prompt. Ignored when a prompt schedule or conditioning is connected. The bundled "
                    "model takes a scene word of its vocabulary (day, sunset, night and their synonyms); empty = its "
                    "default scene.",
                ),
                io.Int.Input(
                    "num_blocks",
                    default=7,
                    min=1,
                    max=MAX_BLOCKS,
                    step=1,
                    tooltip="Blocks to generate. One block is the family's block_frames latent frames "
                    "(3 for Self-Forcing, 12 video frames, 0.75 s at 16 fps).",
                ),
                io.Float.Input(
                    "seconds",
                    default=0.0,
                    min=0.0,
                    max=3600.0,
                    step=0.25,
                    tooltip="Video length in seconds; when above 0 it replaces num_blocks (rounded up "
                    "to whole blocks at the model's frame rate).",
                ),
                *frame_size_inputs(),
                io.String.Input(
                    "denoising_steps",
                    default="",
                    tooltip="Timesteps of the few-step schedule, noisiest first, comma-separated. "
                    "Empty (default) = the family's own list (Self-Forcing 1000,750,500,250; CausVid 1000,757,522; "
                    "Krea 5 steps). Fewer steps are faster and blurrier.",
                ),
                io.Int.Input(
                    "seed",
                    default=0,
                    min=0,
                    max=0xFFFFFFFFFFFFFFFF,
                    control_after_generate=True,
                    tooltip="Noise seed; the same seed, settings and device give the same video.",
                ),
                types.KVCacheConfig.Input(
                    "kv_cache",
                    optional=True,
                    tooltip="Cache settings (window, sink, offload, int8). Default: "
                    "global, full precision, on the GPU.",
                ),
                io.Conditioning.Input(
                    "conditioning",
                    optional=True,
                    tooltip="A text embedding from a ComfyUI text encoder node (UMT5 for Wan); "
                    "replaces the prompt text.",
                ),
                types.PromptSchedule.Input(
                    "prompt_schedule",
                    optional=True,
                    tooltip="Prompts that switch at given seconds (Inferix Prompt Schedule); replaces the prompt text.",
                ),
                types.ActionSchedule.Input(
                    "action_schedule",
                    optional=True,
                    tooltip="Actions over time for interactive world models (Inferix "
                    "Action Schedule); they switch at block boundaries.",
                ),
                types.StreamSettings.Input(
                    "stream",
                    optional=True,
                    tooltip="Inferix Stream Settings: write the mp4 to the output folder "
                    "block by block while generating. A stopped run keeps a "
                    "playable file of the frames so far.",
                ),
                io.Image.Input(
                    "start_frames",
                    optional=True,
                    tooltip="Video frames to continue from, at this node's width and height. The "
                    "oldest frames are dropped to whole blocks (4 frames per latent frame); "
                    "fewer than one block are padded with the first frame. Needs a VAE "
                    "with an encoder.",
                ),
                io.Image.Input(
                    "start_image",
                    optional=True,
                    tooltip="Image-started world models (Matrix-Game 2.0): the image the video starts from "
                    "(e.g. Load Image). It is centre-cropped to width:height and resized, as the "
                    "authors do. Without an Action Schedule the run is steered live from this node's "
                    "panel (keys + mouse-look). Other models refuse it.",
                ),
                io.ClipVision.Input(
                    "clip_vision",
                    optional=True,
                    tooltip="Load CLIP Vision with clip_vision_h.safetensors: the start image's visual "
                    "tokens, computed with the authors' preprocessing (penultimate layer).",
                ),
                io.ClipVisionOutput.Input(
                    "clip_vision_output",
                    optional=True,
                    tooltip="Or the tokens themselves from CLIP Vision Encode (its "
                    "penultimate_hidden_states; ComfyUI crops and antialiases, the authors do not). "
                    "Used instead of clip_vision when both are connected.",
                ),
                # last, so workflows saved before it keep their widget values
                types.WorldState.Input(
                    "world_state",
                    optional=True,
                    tooltip="Continue a saved world (Inferix Load World State, or another Block Denoise's "
                    "world_state output) instead of starting one: its frames, noise and decoder continue "
                    "exactly. Needs the same model, width, height, steps and KV cache; the seed is unused; "
                    "a different prompt switches the prompt at the first new block.",
                ),
            ],
            outputs=[
                io.Latent.Output(
                    "latent",
                    tooltip="Clean latents as a core LATENT, samples [B, C, F, h, w] in VAE "
                    "space (what core VAE Decode and Inferix VAE Decode take).",
                ),
                io.Image.Output("frames", tooltip="Decoded frames as an IMAGE batch, one image per video frame."),
                types.Video.Output(
                    "video",
                    tooltip="The whole result (frames, fps, per-block timings, the "
                    "streamed file) for Inferix Stream Out, Profile Report and "
                    "LV-Bench Score.",
                ),
                # last, so the links of workflows saved before it keep their output slots
                io.Video.Output(
                    "core_video",
                    display_name="VIDEO",
                    tooltip="The frames and fps as a core VIDEO, for core Save Video, Preview Video or "
                    "Get Video Components.",
                ),
                types.WorldState.Output(
                    "world_state_out",  # ids of inputs and outputs must differ
                    display_name="world_state",
                    tooltip="The world after the last block, for Inferix Save World State or another Block "
                    "Denoise's world_state input (captured only when this output is connected).",
                ),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.dynprompt],  # not Hidden.prompt: V1 names it 'prompt', as our widget
        )

    @classmethod
    def validate_inputs(cls, denoising_steps: str | None = None) -> bool | str:
        # One input only: ComfyUI pins a validator's message on every input it names, so a message about one
        # input would show on each. width, height, num_blocks and seconds have their min/max checked by
        # ComfyUI itself (pinned on that input); what min/max cannot say is checked in execute (size_problem).
        if denoising_steps is not None:
            steps = parse_steps(denoising_steps)
            if isinstance(steps, str):
                return steps
        return True

    @classmethod
    def execute(
        cls,
        world_model: Any,
        prompt: str,
        num_blocks: int,
        seconds: float,
        width: int,
        height: int,
        denoising_steps: str,
        seed: int,
        kv_cache: Any = None,
        conditioning: Any = None,
        prompt_schedule: Any = None,
        action_schedule: Any = None,
        stream: Any = None,
        start_frames: Any = None,
        start_image: Any = None,
        clip_vision: Any = None,
        clip_vision_output: Any = None,
        world_state: Any = None,
    ) -> io.NodeOutput:
        from inferix_core.api import (
            block_timing,
            check_plan,
            generate_video,
            open_video_sinks,
            plan_run,
            seconds_to_blocks,
        )
        from inferix_core.errors import ConfigError
        from inferix_core.profiling import Profiler

        problem = size_problem(width, height, num_blocks, seconds, world_model)
        if problem:
            raise ConfigError(problem)
        steps = parse_steps(denoising_steps)
        if isinstance(steps, str):
            raise ConfigError(steps)
        sampling = dataclasses.replace(world_model.sampling, denoising_steps=steps) if steps else world_model.sampling
        if seconds > 0:
            num_blocks = seconds_to_blocks(world_model, seconds, sampling)
            if num_blocks > MAX_BLOCKS:  # the same cap as num_blocks: seconds must not be a way around it
                raise ConfigError(
                    f"seconds={seconds:g} is {num_blocks} blocks for this model, more than the {MAX_BLOCKS}-block "
                    f"limit; ask for at most {block_timing(world_model, sampling).video_seconds(MAX_BLOCKS):g} s"
                )
        # the model is a link, so ComfyUI cannot show it to validate_inputs: the budget is checked here,
        # before any model work
        num_start = 0 if start_frames is None else len(start_frames)
        plan = plan_run(
            world_model,
            kv_cache,
            width,
            height,
            num_blocks,
            sampling,
            num_initial_frames=-(-num_start // world_model.temporal_compression),
        )
        log.info("%s", plan.describe())
        check_plan(plan, world_model)  # also: the VAE decodes as planned
        rt.ensure_loaded(world_model, plan.total_bytes - plan.weights_bytes)  # ComfyUI makes room, reloads if evicted
        text = (
            prompt_schedule
            if prompt_schedule is not None
            else (conditioning_tensor(conditioning) if conditioning is not None else prompt)
        )
        sinks = []
        if stream is not None:
            folder, prefix = split_prefix(stream.filename_prefix)
            sinks = open_video_sinks(
                folder, prefix, stream.fps or world_model.fps, crf=stream.crf, frames_ext=stream.save_frames
            )
        hooks = rt.BlockHooks(cls.hidden.unique_id, num_blocks)
        with contextlib.ExitStack() as stack:
            actions = action_schedule
            image_world = start_image is not None and start_image_role(world_model, start_image) == "image_world"
            spec = control_spec_of(world_model) if image_world else None
            if spec is not None and action_schedule is None:  # steered live from the page (web_ext/inferix_live.js)
                actions = stack.enter_context(live_controls.open_channel(str(cls.hidden.unique_id), spec))
                rt.send_event("inferix.controls", {"node": str(cls.hidden.unique_id), "controls": spec.page_config()})
            try:
                result = generate_video(
                    world_model,
                    text,
                    num_blocks=num_blocks,
                    width=width,
                    height=height,
                    seed=seed,
                    cache=kv_cache,
                    sampling=sampling,
                    actions=actions,
                    hooks=hooks,
                    profiler=Profiler(world_model.device),
                    sinks=sinks,
                    start_frames=start_frames,
                    start_image=start_image,
                    clip_vision=image_clip_vision(clip_vision, clip_vision_output),
                    world_state=world_state,
                    keep_world_state=output_linked(cls.hidden.dynprompt, cls.hidden.unique_id, WORLD_STATE_OUTPUT),
                )
            except BaseException:
                if sinks and getattr(sinks[0], "frames_written", 0):  # closed by generate_video: the final name
                    log.warning(
                        "stopped; kept the %d frames streamed so far in %s", sinks[0].frames_written, sinks[0].path
                    )
                raise
            finally:
                hooks.close()
        # [B,F,C,h,w] → [B,C,F,h,w], in VAE space as core LATENTs are (core VAE Decode reads it right)
        latent = {"samples": to_core_latent(world_model.vae, result.latents.permute(0, 2, 1, 3, 4)).contiguous()}
        ui = {"text": [summarize(result, width, height) + "\n" + plan.describe()]}  # Stream Out shows the file
        images = frames_to_image(result.frames)
        if world_state is not None:
            ui["text"][0] = f"continued the {world_state.describe()}\n" + ui["text"][0]
        return io.NodeOutput(latent, images, result, core_video(images, result.fps, result), result.world_state, ui=ui)
