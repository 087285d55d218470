"""InteractiveSession: one open-ended stream that a person (or a program) steers between blocks.

The session is a client of the engine: an `Engine` and one `Stream` (KV cache, prompt K/V, noise source,
streaming decoder, sinks, resident blocks); each block is `Engine.step`, the same block body as
`generate_video` and `BlockDiffusionPipeline.stream()` (pipeline/loop.py `advance`). Inputs (prompt, action, pause, resume, stop) are queued and applied only at block
boundaries, in arrival order. A prompt switch re-caches the resident window under the new prompt
(LongLive's "KV re-cache", arXiv:2509.22622) unless `hard_switch=True`. It does not serve HTTP
or read keys: `inferix play` (commands/play.py) wires a LiveView to it. See docs/interactive.md.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..cache import KVCacheConfig
from ..controls import Control, LiveControls, block_rows
from ..engine import BlockInput, Engine, Stream
from ..engine.conditioning import actions_to_tensor, encode_prompt, encode_start_frames, latent_size
from ..engine.image_conditioning import resized_image_frames
from ..engine.image_world import (
    MatrixGameInputs,
    StartImageInputs,
    image_world_extra,
    resume_image_world,
    start_image_role,
)
from ..engine.run_inputs import encode_run_prompt
from ..engine.schedules import SCENE_CUT_PREFIX
from ..engine.world_state import WorldState
from ..errors import ConfigError
from ..models.registry import WorldModel
from ..pipeline import SamplingConfig
from ..pipeline.frames import keep_resident
from ..pipeline.recache import check_style, history_frames
from ..profiling import NullProfiler
from ..sinks.live import InputQueue
from .session_parts import BranchHere, QueuedInputs, SessionBlock

log = logging.getLogger(__name__)

# How a prompt switch re-caches (see `InteractiveSession.recache`): "window" is LongLive's own algorithm
# (global_sink: true), "window_reset" theirs with global_sink: false, "blocks" re-runs every resident block's
# context pass in order; the default per family is in the registry.

MAX_QUEUED_ACTIONS = 8  # actions waiting for their blocks (one block each)


class InteractiveSession(QueuedInputs, BranchHere):
    """Generate one block at a time; apply queued inputs at each block boundary.

    Args:
        world_model: the model handle (`load_world_model`).
        prompt: the starting prompt (text, or a (1, L, text_dim) embedding).
        width, height: pixel size (multiples of the VAE stride × patch size).
        seed: seeds the noise; each block's noise is drawn when the block starts.
        cache, sampling: override the model's defaults.
        sinks: frame sinks (Mp4Sink, LiveView, ...) fed every decoded block.
        inputs: the queue to drain (a LiveView's `inputs`); a new one by default.
        decode: decode each block to pixels (needs a VAE).
        hard_switch: on a prompt switch only swap the cross-attention K/V (keep the cached self-attention
            K/V computed under the old prompt) instead of re-caching the resident window.
        hold_actions: with no new action, repeat the last one (a held key); otherwise use `default_action`.
        default_action: action before the first action event (and between them if not holding);
            None = no action input.
        prompt_encoder: text → (1, L, text_dim); default `api.encode_prompt` with the model's text encoder.
        profiler: a Profiler; `on_run_start` is called here and `on_run_end` by `close()`.
        start_image, clip_vision: Wan 2.1 I2V models (prompt + start image, no actions) and image-started
            keyboard/mouse models (Matrix-Game 2.0): the start image
            and its CLIP vision (encoder, file, CLIP_VISION_OUTPUT or tokens). Such a session is steered
            by `control(...)` events instead of named actions (`inferix_core.controls.LiveControls`).
        world_state: continue a world saved by `capture_world` / `save_world` (`world_state.read_world_state`):
            its cache, prompt, noise, decoder cache, re-cache history and held action; `prompt` and
            `seed` are then unused. Refused, naming the difference, for another model or settings.
    """

    def __init__(
        self,
        world_model: WorldModel,
        prompt: str | torch.Tensor = "",
        *,
        width: int,
        height: int,
        seed: int = 0,
        cache: KVCacheConfig | None = None,
        sampling: SamplingConfig | None = None,
        sinks: Iterable[Any] = (),
        inputs: InputQueue | None = None,
        decode: bool = True,
        decoder: str = "vae",
        hard_switch: bool = False,
        hold_actions: bool = True,
        default_action: str | None = None,
        prompt_encoder: Callable[[str], torch.Tensor] | None = None,
        profiler: NullProfiler | None = None,
        recache_style: str | None = None,
        start_image: Any = None,
        clip_vision: Any = None,
        world_state: WorldState | None = None,
    ):
        self.world_model = world_model
        sampling = sampling or world_model.sampling
        # LongLive 2.0 (shot sinks / shot RoPE offset): a prompt starting with SCENE_CUT_PREFIX starts a shot, and
        # their pipeline switches prompts without a re-cache, so every switch is hard (and the shot cache has no
        # restart for one)
        self._shots = bool(sampling.shot_sinks or sampling.shot_rope_offset)
        if self._shots and not hard_switch:
            log.info(
                "%s switches prompts without a re-cache (its authors' pipeline): hard switches", world_model.family
            )
            hard_switch = True
        self.hard_switch = hard_switch
        self._new_shot = False  # the coming block starts a shot
        self._shot_caption: str | None = None  # the shot's bare caption, for its blocks after the first
        self.recache_style = recache_style or world_model.switch_recache or "blocks"
        self.hold_actions = hold_actions
        # the start image, decided once (image_world.start_image_role): Wan 2.1 I2V's cond_concat per block and
        # CLIP tokens beside the prompt; Matrix-Game's start image, action track and live controls; TI2V's clean
        # first latent (below)
        self._image: MatrixGameInputs | None = None
        self._controls: LiveControls | None = None
        self._start: StartImageInputs | None = None
        role = start_image_role(world_model, start_image)
        if role == "prompt_and_image":
            self._start = StartImageInputs(world_model, start_image, width, height, clip_vision)
        elif role == "ti2v" and clip_vision is not None:
            log.info("a TI2V model starts from the image's latent alone; the CLIP vision input is ignored")
        elif role == "image_world":
            self._image = MatrixGameInputs(world_model, start_image, width, height, clip_vision)
            self._controls = LiveControls(self._image.spec)
            if world_state is not None:  # the saved action rows, after checking the start image is the world's
                resume_image_world(self._image, world_state)
        spec = self._image.spec if self._image is not None else None
        self.inputs = inputs if inputs is not None else InputQueue(set(world_model.action_names), controls=spec)
        self.profiler = profiler if profiler is not None else NullProfiler()
        self._encode = prompt_encoder or (lambda text: encode_prompt(world_model, text))
        if default_action is not None:
            self._check_action(default_action)
        self.default_action = default_action
        # 1. geometry, pipeline and the stream state (cache, prompt K/V, per-block noise)
        self.profiler.on_run_start(
            {
                "family": world_model.family,
                "width": width,
                "height": height,
                "seed": seed,
                "interactive": True,
                "hard_switch": hard_switch,
            }
        )
        lat_h, lat_w = latent_size(world_model, width, height)
        # the engine: the block loop (pipeline, Krea's pixel window, decoder choice, profiler)
        self.engine = Engine(world_model, sampling, cache, decoder=decoder, decode=decode, profiler=self.profiler)
        self.pipeline = self.engine.pipeline
        check_style(self.recache_style, self.engine.cache_config)  # refused before any model work
        # the clean blocks a re-cache needs beyond the resident ones ("window_reset": the last window)
        self._history_frames = 0 if hard_switch else history_frames(self.recache_style, self.engine.cache_config)
        with self.profiler.stage("text_encode"):
            if self._image is None and world_state is not None and "extra.context" in world_state.tensors:
                context = world_state.tensors["extra.context"]  # the saved prompt stays
                prompt = world_state.header["extra"].get("prompt", "<saved>")
            else:  # an image model's CLIP tokens take the place of text
                context, _ = encode_run_prompt(world_model, prompt, self._image, encode=self._encode)
        self._context = context  # the conditioning in force; a switch to an equal one costs nothing
        self.prompt = "<embedding>" if isinstance(prompt, torch.Tensor) else prompt
        if world_state is None:  # a resumed world's stream is built by `_resume`, below
            prefix = None
            if role == "ti2v":  # as generate_video's start image for a TI2V model: one frame, encoded by the VAE
                one = dataclasses.replace(self.pipeline.sampling, block_frames=1)
                frames = resized_image_frames(start_image, height, width)
                prefix = encode_start_frames(world_model, frames, width, height, one)
            image = self._start.visual_context if self._start is not None else None
            self._stream = self.engine.open(context, lat_h, lat_w, seed=seed, image_context=image,
                                            clean_prefix=prefix, sinks=sinks)  # fmt: skip
            self.state = self._stream.state  # the history it keeps (setter)
        self.at_boundary = True  # False while a block is being generated (its cache is half written)
        self.save_requests = 0  # "save" inputs seen (`inferix play` saves the world at those boundaries)
        # 3. input state: events wait in _pending until a boundary consumes them
        self._pending: deque[dict[str, Any]] = deque()
        # queued actions, one per coming block; bounded, the oldest go first, so a key pressed now is seen soon
        self._actions: deque[str] = deque(maxlen=MAX_QUEUED_ACTIONS)
        self._last_action: str | None = None
        self.paused = False
        self.stopped = False
        self.closed = False
        self.action_log: list[str | None] = []  # the action of every generated block, in order
        self.control_log: list[Control] = []  # keyboard/mouse models: the state written into each block
        self.prompt_log: list[tuple[int, str]] = [(0, self.prompt)]  # (first block, prompt label)
        self.num_recaches = 0
        # "branch here": futures of this stream running side by side until one is picked (docs/world_state.md)
        self.seed = seed
        self.start_branching()
        if world_state is not None:
            self._resume(world_state, sinks)

    # -- the stream the engine runs (state, decoder, sinks, resident blocks) -----------------------------
    @property
    def state(self):
        """The pipeline's stream state: KV cache, prompt K/V, noise, position."""
        return self._stream.state

    @state.setter
    def state(self, state) -> None:
        state.history_frames = self._history_frames
        self._stream.state = state

    @property
    def sinks(self) -> list:
        return self._stream.sinks

    # -- saving and resuming the world ---------------------------------------------------------------
    def capture_world(self) -> WorldState:
        """The world as it is at this block boundary (`world_state.WorldState`, CPU copies)."""
        if not self.at_boundary:
            raise ConfigError(
                f"block {self.state.next_block} was interrupted half-way, so its KV cache is half written; a world "
                "can only be saved between blocks (stop with the page's stop button, a save input or --max-blocks)"
            )
        extra, rows = {"prompt": self.prompt, "last_action": self._last_action}, {}
        if self._image is not None:  # Matrix-Game: the action rows read so far and the start image's prints
            extra["image_world"], rows = image_world_extra(self._image, self.state.next_frame)
        return self.engine.capture(self._stream, extra=extra, extra_tensors={"context": self._context, **rows})

    def save_world(self, path) -> Any:
        """Write the world to `path` (never overwriting; a taken name gets the next number); returns the path."""
        from ..engine.world_state import write_world_state

        return write_world_state(path, self.capture_world())

    def _resume(self, world: WorldState, sinks) -> None:
        state, decoder, history = self.engine.resume(world)
        self._stream = Stream(state, decoder, list(sinks), history)
        self.state = state  # the history it keeps (setter)
        self._context = self._context.to(self.pipeline.device)
        if "extra.context" not in world.tensors:  # saved at the stream level: the given prompt takes over
            log.info("the world state does not name its prompt; continuing under the session's prompt")
            self.pipeline.set_prompt(self.state, self._context)
        self._last_action = world.header["extra"].get("last_action")
        self.prompt_log = [(self.state.next_block, self.prompt)]
        log.info("resumed a world at block %d (frame %d)", self.state.next_block, self.state.next_frame)

    @property
    def num_blocks(self) -> int:
        return self.state.next_block

    @property
    def pending_inputs(self) -> int:
        """Events received but not applied yet (queued, or waiting behind an action for a later block)."""
        return len(self._pending) + len(self.inputs) + len(self._actions)

    # -- the loop ----------------------------------------------------------------------------------
    def step(self) -> SessionBlock | None:
        """Apply the inputs that arrived since the last boundary, then generate one block.

        Returns None without generating while paused or once stopped.
        """
        if self.closed:
            raise ConfigError("this session is closed; start a new InteractiveSession")
        # 1. the block boundary: apply queued inputs in order
        new_prompts = self._apply_inputs()
        if new_prompts and self._branch is not None:  # each future has its prompt: pick one first
            log.warning("prompt %r ignored while branched; pick a future first", new_prompts[-1][:60])
            new_prompts = []
        if self._shot_caption is not None and not self._new_shot and not new_prompts and not self.paused:
            self._caption_after_shot_start()
        recache_s = self._switch_prompt(new_prompts) if new_prompts else 0.0  # while paused too: resume under it
        if self.stopped or self.paused:
            return None
        # 2. this block's action
        if self._actions:
            name = self._actions.popleft()
        else:
            name = self._last_action if self.hold_actions and self._last_action is not None else self.default_action
        n = self.pipeline.sampling.block_frames
        if self._image is not None:  # the held keys/mouse fill this block's new rows (the authors' streaming demo)
            lo, hi = block_rows(self.state.next_frame, n, self._image.track.stride)
            control, extra = self._controls.take_block(hi - lo)
            self._image.track.write_block(self.state.next_frame, n, control, extra)
            self.control_log.append(self._image.track.block_controls[-1])
            action = self._image.for_block(self.state.next_frame, n)
            name = "+".join(control.keys) or "none"
        elif self._start is not None:  # Wan 2.1 I2V: no actions, the start image's latents of this block
            action, name = self._start.for_block(self.state.next_frame, n), None
        else:
            action = None if name is None else actions_to_tensor(self.world_model, [name], n)
        if self._branch is not None:
            return self._branch_step(name, action)
        # 3. the engine's block: denoise, decode to the sinks, then the clean K/V (after the decode, so the frames
        # are out one transformer call sooner; an interrupt before that leaves a half-written cache)
        self.at_boundary = False
        new_shot, self._new_shot = self._new_shot, False
        out = self.engine.step(self._stream, BlockInput(action=action, new_shot=new_shot))
        self.at_boundary = True
        self._last_action = name if name is not None else self._last_action
        self.action_log.append(name)
        switched = len(self.prompt_log) > 1 and self.prompt_log[-1][0] == out.index
        return SessionBlock(
            out.index,
            out.start_frame,
            out.latents,
            out.frames,
            name,
            self.prompt,
            switched,
            out.denoise_s,
            out.decode_s,
            recache_s,
        )

    def run(
        self,
        max_blocks: int | None = None,
        idle_wait_s: float = 0.1,
        on_block: Callable[[SessionBlock], None] | None = None,
    ) -> int:
        """Generate until a stop input (or `max_blocks` more blocks); wait for input while paused.

        Returns the number of blocks generated by this call.
        """
        done = 0
        while not self.stopped and (max_blocks is None or done < max_blocks):
            block = self.step()
            if block is None:
                if not self.stopped:
                    self.wait_for_input(idle_wait_s)
                continue
            done += 1
            if on_block is not None:
                on_block(block)
        return done

    def wait_for_input(self, timeout_s: float) -> bool:
        """Block until an input arrives (it stays queued, in order) or `timeout_s` passes."""
        event = self.inputs.get(timeout=timeout_s)
        if event is None:
            return False
        self._pending.append(event)  # older than anything still in the queue, so order holds
        return True

    def close(self) -> None:
        """Close the sinks (an Mp4Sink publishes its file) and end the profiler run."""
        if self.closed:
            return
        self.closed = True
        if self._branch is not None:  # the futures were only shown; the files end at the branch point
            log.warning("closed while branched: the %d futures' %d blocks were shown but none was kept (pick one "
                        "before stopping to write it)", self._branch.num_futures, len(self._branch_actions))  # fmt: skip
            self._branch.drop()
            self._branch = None
        self.engine.close(self._stream)

    def __enter__(self) -> InteractiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- boundary work -------------------------------------------------------------------------------
    def _apply_inputs(self) -> list[str]:
        """Consume every pending event in order; returns the prompts that arrived (the last one wins).

        Everything applies at this boundary except actions: an action conditions one block, so actions
        queue and the coming blocks take them one each, in order (three quick key presses steer three
        blocks). Pause keeps them queued; stop leaves them unused (see `pending_inputs`).
        """
        self._pending.extend(self.inputs.drain())
        new_prompts: list[str] = []
        while self._pending and not self.stopped:
            event = self._pending[0]
            kind = event["type"]
            if kind == "action":
                if self._check_action(event["name"], strict=False):
                    self._actions.append(event["name"])
            elif kind == "control":
                if self._controls is not None:
                    self._controls.apply(event)
                else:
                    log.warning("this model takes no keyboard/mouse controls; control event ignored")
            elif kind == "prompt":
                new_prompts.append(event["text"])  # several at one boundary: each is logged, the last is used
            elif kind == "pause":
                self.paused = True
            elif kind == "resume":
                self.paused = False
            elif kind == "stop":
                self.stopped = True
                log.info("stop requested after %d blocks", self.state.next_block)
            elif kind == "branch":
                self.branch(event["futures"])
            elif kind == "pick":
                self.pick(event["index"])
            elif kind == "save":
                self.save_requests += 1
            self._pending.popleft()
        return new_prompts

    def _check_action(self, name: str, strict: bool = True) -> bool:
        if name in self.world_model.action_names:
            return True
        message = f"unknown action {name!r}; this model knows {list(self.world_model.action_names)}"
        if strict:
            raise ConfigError(message)
        log.warning("%s (ignored)", message)
        return False

    def _switch_prompt(self, texts: list[str]) -> float:
        """New cross-attention K/V for the last of `texts`; then re-cache the resident window under it."""
        t0 = time.perf_counter()
        if self._image is not None:
            log.info("this model is steered by its start image and controls; prompt %r ignored", texts[-1][:60])
            return 0.0
        block = self.state.next_block
        for text in texts:
            self.prompt_log.append((block, text))
            log.info("prompt from block %d: %r", block, text[:60])
        self._new_shot, self._shot_caption = False, None
        if self._shots and block > 0 and texts[-1].startswith(SCENE_CUT_PREFIX):  # their _is_shot_boundary
            self._new_shot, self._shot_caption = True, texts[-1][len(SCENE_CUT_PREFIX) :]
        try:
            with self.profiler.stage("text_encode"):
                context = self._encode(texts[-1])
        except ConfigError as exc:  # a typed prompt the model cannot take (a fixed vocabulary): keep streaming
            log.warning("prompt %r not taken, the stream keeps %r: %s", texts[-1][:60], self.prompt[:60], exc)
            return time.perf_counter() - t0
        self.prompt = texts[-1]
        if torch.equal(context, self._context):  # e.g. a model without a text encoder: nothing changes
            log.info("the new prompt gives the same conditioning; the cache is kept as it is")
            return time.perf_counter() - t0
        self._context = context
        if self.engine.switch_prompt(self._stream, context, "none" if self.hard_switch else self.recache_style):
            self.num_recaches += 1
        return time.perf_counter() - t0

    def _caption_after_shot_start(self) -> None:
        """The shot's later blocks are conditioned on its bare caption, as LongLive 2.0's data lays shots out."""
        caption, self._shot_caption = self._shot_caption, None
        with self.profiler.stage("text_encode"):
            self._context = self._encode(caption)
        self.pipeline.set_prompt(self.state, self._context)
        self.prompt = caption

    @torch.no_grad()
    def recache(self) -> bool:
        """Re-write the resident frames' K/V under the current prompt (`recache_style`, below).

        "window" (LongLive's own `_recache_after_switch` with `global_sink: true`): one context pass (t =
        context_noise) over the clean latents of the resident frames after the sink, attending to the
        sink's cached K/V and to each other with no causal mask; the sink keeps the first prompt's K/V.
        While nothing has been evicted yet the pass covers every frame from 0, the sink included (their
        window then starts at frame 0). One transformer call in all.

        "window_reset" (theirs with `global_sink: false`, docs/longlive_global_sink.md): the cache is reset and one
        context pass over the last window_frames clean frames re-writes every slot, the sink slots with the
        oldest of them (so the sink follows the switch). One transformer call; ring caches only.

        "blocks": the cache is reset and the stored clean latents of every block that still has resident frames
        are run again through the context pass (t = context_noise), sink blocks first, in their original
        block boundaries and with their original actions. Frames evicted before the switch stay evicted:
        after the sink blocks the cache restarts at the window's first block. Costs one transformer call
        per resident block. Every cache kind can skip frames (KVCache.restart), so it returns True.
        """
        if self.engine.recache(self._stream, self.recache_style):
            self.num_recaches += 1
            log.debug("re-cached the resident frames up to %d (%s)", self.state.next_frame - 1, self.recache_style)
        return True

    def _remember(self, start: int, latents: torch.Tensor, action: torch.Tensor | None) -> None:
        """Keep the clean latents of blocks with resident frames (sink blocks included); drop the rest."""
        self._stream.history = keep_resident([*self._stream.history, (start, latents, action)], self.state)


__all__ = ["InteractiveSession", "SessionBlock"]
