"""Many sessions on one GPU: independent streams batched per block step, each streaming to its own sink.

Streams differ in prompt, actions, seed and position (one admitted later starts at frame 0 while the
others go on). `MultiStreamEngine.admit` asks the memory planner whether one more stream fits the
budget (the batch's KV cache, activations and decoders) and refuses it with the planner's reason when
it does not. `step()` is the engine's `step_many`: one block of every live stream as one batch, each
decoded with its own streaming decoder into its `Outlet`, a bounded queue drained by a thread of its
own into the sink. A slow consumer therefore never stalls the others: when its queue is full the block
is dropped (policy "drop", counted and logged) or the outlet raises `StreamStopped` and the stream is
stopped, its pages freed (policy "stop", logged); a sink that raises stops its stream.

    engine = MultiStreamEngine(pipe, 60, 104, budget_bytes=80 * 2**30, decoder_factory=vae.stream_decoder)
    a = engine.admit(StreamRequest(prompt_a, seed=1), Mp4Sink("out", "a", fps=16))
    b = engine.admit(StreamRequest(prompt_b, seed=2, actions=keys_b), LiveView().start())
    while engine.active:
        engine.step()
    engine.close()
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..cache.planner import MemoryPlan, available_memory_bytes, plan_for
from ..engine import BlockInput, Engine, EngineBlock
from ..engine import Stream as EngineStream
from ..engine.forks import action_rows
from ..errors import CacheBudgetError, ConfigError, StreamStopped
from ..memory import PlanInput
from ..pipeline import BlockDiffusionPipeline
from ..pipeline.block_diffusion import StreamState
from ..pipeline.streams import new_arena
from ..sinks.base import FrameSink

log = logging.getLogger(__name__)

POLICIES = ("drop", "stop")
_CLOSE = object()


class Outlet:
    """One stream's bounded queue of decoded blocks, written to its sink by a thread of its own.

    `offer()` never waits: on a full queue the policy decides (drop the block, or stop the stream).
    A sink that raises marks the outlet failed (its error kept) and the rest of its queue is discarded.
    """

    def __init__(self, name: str, sink: FrameSink, max_blocks: int = 4, policy: str = "drop"):
        if policy not in POLICIES:
            raise ConfigError(f"slow-consumer policy must be one of {POLICIES}, got '{policy}'")
        if max_blocks < 1:
            raise ConfigError(f"an outlet queue holds at least 1 block, got {max_blocks}")
        self.name, self.sink, self.policy = name, sink, policy
        self.queue: queue.Queue = queue.Queue(max_blocks)
        self.offered = self.written = self.dropped = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name=f"inferix-outlet-{name}", daemon=True)
        self._thread.start()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def offer(self, frames: np.ndarray, block_index: int) -> bool:
        """Queue a block for the sink; False when the stream must stop (policy "stop" on a full queue, or
        the sink failed)."""
        if self.failed:
            return False
        self.offered += 1
        try:
            self.queue.put_nowait((frames, block_index))
            return True
        except queue.Full:
            if self.policy == "stop":
                log.warning("stream '%s': its consumer is %d blocks behind; stopping the stream (policy 'stop')",
                            self.name, self.queue.maxsize)  # fmt: skip
                return False
            self.dropped += 1
            log.warning("stream '%s': consumer %d blocks behind; block %d dropped (%d so far, policy 'drop')",
                        self.name, self.queue.maxsize, block_index, self.dropped)  # fmt: skip
            return True

    def write(self, frames: np.ndarray, block_index: int) -> None:
        """The engine's sink call: queue the block, or raise `StreamStopped` when the stream must stop."""
        if not self.offer(frames, block_index):
            raise StreamStopped(f"consumer: {self.error}" if self.failed else "consumer too slow")

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is _CLOSE:
                return
            if self.failed:
                continue  # the sink failed: discard what is left, keep draining so offer() never blocks
            try:
                self.sink.write(*item)
                self.written += 1
            except Exception as exc:  # a consumer's failure stops its own stream only
                self.error = exc
                log.error("stream '%s': its sink failed (%s); the stream stops, the others go on", self.name, exc)

    def close(self, timeout: float = 30.0) -> bool:
        """Let the queue drain (at most `timeout` s), then close the sink; False if the consumer did not finish
        (the sink is then left open rather than closed under a write in progress, logged)."""
        with contextlib.suppress(queue.Full):  # a stalled consumer: give up after the timeout
            self.queue.put(_CLOSE, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("stream '%s': its sink is still busy after %.0f s; left open", self.name, timeout)
            return False
        self.sink.close()
        return True


@dataclass
class StreamRequest:
    """One session: its prompt (1, L, text_dim), seed, actions and length.

    actions: (1, F, A) rows from the stream's frame 0, or fn(start_frame, num_frames) → (1, n, A); None
        for models without actions. A live session can change them with `MultiStreamEngine.set_actions`.
    num_blocks: blocks to generate, then the stream finishes; None runs until stopped (needs a window:
        a global-attention cache would grow without bound).
    """

    context: torch.Tensor
    seed: int = 0
    actions: torch.Tensor | Callable[[int, int], torch.Tensor] | None = None
    num_blocks: int | None = None
    name: str = ""


@dataclass(eq=False)
class Stream:
    """One admitted session: its request, the engine's stream of it (sinks: its outlet) and what it did."""

    id: int
    request: StreamRequest
    stream: EngineStream
    outlet: Outlet
    blocks_done: int = 0
    stopped: str = ""  # why it stopped ("" while live)
    latents: list[torch.Tensor] = field(default_factory=list)  # kept only with keep_latents

    @property
    def state(self) -> StreamState:
        return self.stream.state

    @property
    def decoder(self) -> Any:
        return self.stream.decoder

    def actions(self, block_frames: int) -> torch.Tensor | None:
        """Rows counted from the stream's frame 0, or its function of the absolute frame."""
        return action_rows(
            self.request.actions, self.state.next_frame, block_frames, 0, f"stream '{self.request.name}'"
        )


class MultiStreamEngine:
    """Independent streams of one pipeline, admitted by the planner and batched per block; module docstring."""

    def __init__(
        self,
        pipe: BlockDiffusionPipeline,
        latent_height: int,
        latent_width: int,
        *,
        budget_bytes: int | None = None,
        decoder_factory: Callable[[], Any] | None = None,
        decoder_bytes: int = 0,
        max_queue_blocks: int = 4,
        policy: str = "drop",
        keep_latents: bool = False,
    ):
        """
        Args:
            budget_bytes: device bytes all streams together may use; None = the device's free memory on CUDA,
                no limit elsewhere (the plan is then only reported).
            decoder_factory: makes one streaming decoder per stream (e.g. `vae.stream_decoder`), whose
                `decode(latents (1, C, f, h, w))` gives pixels (1, 3, T, H, W) in [-1, 1].
            decoder_bytes: one decoder's working set (weights shared, counted once per stream to be safe).
            max_queue_blocks, policy: each outlet's bound and what a full queue does ("drop" or "stop").
        """
        if policy not in POLICIES:
            raise ConfigError(f"slow-consumer policy must be one of {POLICIES}, got '{policy}'")
        self.pipe = pipe
        self.engine = Engine(pipeline=pipe, decoder_factory=decoder_factory)
        self.latent_height, self.latent_width = latent_height, latent_width
        self.arena = new_arena(pipe, latent_height, latent_width)
        if budget_bytes is None and pipe.device.type == "cuda":
            budget_bytes, source = available_memory_bytes(pipe.device)
            log.info("multi-stream budget: %.1f GiB (%s)", budget_bytes / 2**30, source)
        self.budget_bytes = budget_bytes
        self.decoder_factory, self.decoder_bytes = decoder_factory, decoder_bytes
        self.max_queue_blocks, self.policy, self.keep_latents = max_queue_blocks, policy, keep_latents
        self.streams: dict[int, Stream] = {}
        self._next_id = 0

    @property
    def active(self) -> list[Stream]:
        return [s for s in self.streams.values() if not s.stopped]

    def _max_frames(self, extra: StreamRequest | list[StreamRequest] | None) -> int | None:
        if not self.pipe.cache_config.is_global:
            return None
        more = extra if isinstance(extra, list) else [] if extra is None else [extra]
        reqs = [s.request for s in self.active] + more
        n = self.pipe.sampling.block_frames
        return max(r.num_blocks * n for r in reqs) if reqs else None

    def plan(self, num_streams: int, extra: StreamRequest | list[StreamRequest] | None = None) -> MemoryPlan:
        """The planner's estimate for `num_streams` streams batched (each a batch row)."""
        given = PlanInput(
            self.latent_height, self.latent_width, self.pipe.sampling.block_frames, self._max_frames(extra),
            num_streams, dtype=self.pipe.dtype, budget_bytes=self.budget_bytes,
        )  # fmt: skip
        return plan_for(
            given, self.pipe.model.config, self.pipe.cache_config, vae_bytes=self.decoder_bytes * num_streams
        )

    def _fits(self, plan: MemoryPlan) -> bool:
        return plan.feasible and plan.chosen == self.pipe.cache_config

    def _name(self, request: StreamRequest, offset: int = 0) -> str:
        request.name = request.name or f"stream {self._next_id + offset}"
        if request.num_blocks is None and self.pipe.cache_config.is_global:
            raise ConfigError(
                f"stream '{request.name}' has no num_blocks but the KV cache is global (window_frames=-1) and would "
                "grow without bound; give num_blocks or a window"
            )
        return request.name

    def admit(self, request: StreamRequest, sink: FrameSink) -> int:
        """Start a stream if it fits beside the live ones; returns its id. Raises CacheBudgetError naming why not."""
        name = self._name(request)
        n = len(self.active) + 1
        plan = self.plan(n, request)
        if not self._fits(plan):
            why = plan.message or "the planner would change the cache settings"
            raise CacheBudgetError(
                f"stream '{name}' refused: {n} streams batched need more than the budget of "
                f"{(self.budget_bytes or 0) / 2**30:.2f} GiB. {why}"
            )
        return self._start(request, sink, plan)

    def admit_many(self, streams: list[tuple[StreamRequest, FrameSink]]) -> list[int]:
        """Start several streams at once, or none: the planner counts all of them beside the live ones first and
        refuses (CacheBudgetError, before anything is allocated) naming how many of them would fit."""
        if not streams:
            return []
        reqs = [r for r, _ in streams]
        for i, r in enumerate(reqs):
            self._name(r, i)
        live = len(self.active)
        plan = self.plan(live + len(reqs), reqs)
        if not self._fits(plan):
            fit = next((k for k in range(len(reqs) - 1, 0, -1) if self._fits(self.plan(live + k, reqs[:k]))), 0)
            why = plan.message or "the planner would change the cache settings"
            raise CacheBudgetError(
                f"{len(reqs)} streams refused: {live + len(reqs)} streams batched need more than the budget of "
                f"{(self.budget_bytes or 0) / 2**30:.2f} GiB; at most {fit} of them fit beside the {live} live "
                f"stream(s): admit {fit} or fewer. {why}"
            )
        return [self._start(r, sink, plan) for r, sink in streams]

    def _start(self, request: StreamRequest, sink: FrameSink, plan: MemoryPlan) -> int:
        name, n = request.name, len(self.active) + 1
        outlet = Outlet(name, sink, self.max_queue_blocks, self.policy)
        stream = self.engine.open(request.context, self.latent_height, self.latent_width, seed=request.seed,
                                  sinks=[outlet], keep_history=False, arena=self.arena)  # fmt: skip
        sid = self._next_id
        self._next_id += 1
        self.streams[sid] = Stream(sid, request, stream, outlet)
        log.info("stream '%s' admitted (%d live; planned %.2f GiB)", name, n, plan.total_bytes / 2**30)
        return sid

    def set_prompt(self, sid: int, context: torch.Tensor) -> None:
        """A hard prompt switch of one stream from its next block on (its cached K/V are kept)."""
        self.engine.switch_prompt(self._live(sid).stream, context)

    def set_actions(self, sid: int, actions) -> None:
        self._live(sid).request.actions = actions

    def _live(self, sid: int) -> Stream:
        s = self.streams.get(sid)
        if s is None:
            raise ConfigError(f"no stream {sid}; streams are {sorted(self.streams)}")
        if s.stopped:
            raise ConfigError(f"stream '{s.request.name}' has stopped ({s.stopped})")
        return s

    def stop(self, sid: int, reason: str = "stopped") -> None:
        """Stop one stream and free its pages; its sink is closed once its queue has drained (close())."""
        s = self.streams[sid]
        if s.stopped:
            return
        s.stopped = reason
        self.engine.release(s.stream)
        log.info("stream '%s' stopped: %s", s.request.name, reason)

    def step(self) -> dict[int, EngineBlock]:
        """One block of every live stream, batched (`Engine.step_many`); each decoded block offered to its outlet."""
        live = self.active
        if not live:
            return {}
        n = self.pipe.sampling.block_frames
        made = self.engine.step_many([s.stream for s in live], [BlockInput(action=s.actions(n)) for s in live])
        result = {}
        for s, block in zip(live, made, strict=True):
            result[s.id] = block
            s.blocks_done += 1
            if self.keep_latents:
                s.latents.append(block.latents)
            if s.stream.stopped:  # its outlet refused the block (StreamStopped)
                self.stop(s.id, s.stream.stopped)
            elif s.outlet.failed:
                self.stop(s.id, f"consumer: {s.outlet.error}")
            elif s.request.num_blocks is not None and s.blocks_done >= s.request.num_blocks:
                self.stop(s.id, "done")
        return result

    def run(self, max_steps: int | None = None) -> int:
        """Step until no stream is live (or `max_steps`); returns the steps run."""
        steps = 0
        while self.active and (max_steps is None or steps < max_steps):
            self.step()
            steps += 1
        return steps

    def close(self, timeout: float = 30.0) -> None:
        """Stop every stream, let each outlet drain into its sink and close it."""
        for sid in list(self.streams):
            self.stop(sid, "closed")
        for s in self.streams.values():
            s.outlet.close(timeout)

    def stats(self) -> dict:
        return {
            "streams": {
                s.id: {
                    "name": s.request.name,
                    "blocks": s.blocks_done,
                    "next_frame": s.state.next_frame,
                    "stopped": s.stopped,
                    "queued": s.outlet.queue.qsize(),
                    "written": s.outlet.written,
                    "dropped": s.outlet.dropped,
                    "own_pages": len(s.state.cache.table),
                }
                for s in self.streams.values()
            },
            "arena": self.arena.stats(),
        }

    def __enter__(self) -> MultiStreamEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
