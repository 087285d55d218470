"""Parts of the interactive session: its input methods, and "branch here" (futures side by side until one is picked).

`QueuedInputs` is the thread-safe half of `InteractiveSession` (session.py): its methods only enqueue events
that the session applies at the next block boundary. `BranchHere` is the part of `InteractiveSession` (session.py) that forks the session's stream into futures
(`branching.LiveBranch`: KV pages shared copy-on-write, one batch per block), steps them with the actions the
session receives and keeps the picked one (docs/world_state.md). `SessionBlock` is what a session step returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..cache.ring import RingKVCache
from ..engine.forks import check_branchable
from ..errors import ConfigError
from ..pipeline.streams import release_stream, to_plain_stream
from .branching import Future, LiveBranch

log = logging.getLogger(__name__)

MAX_FUTURES = 4  # futures of one "branch here", shown side by side


@dataclass(frozen=True)
class SessionBlock:
    """One generated block as `step()` returns it."""

    index: int
    start_frame: int  # first latent frame of the block
    latents: torch.Tensor  # (B, n, C, h, w) clean latents
    frames: np.ndarray | None  # (T, H, W, 3) uint8 decoded frames (None with decode=False)
    action: str | None  # action name used for the block (None: no action input)
    prompt: str  # label of the prompt in force
    prompt_switched: bool  # the prompt changed at this block's boundary
    denoise_s: float
    decode_s: float
    recache_s: float  # time spent re-caching the window at this boundary (0 without a switch)


class QueuedInputs:
    """Input events for `InteractiveSession`, queued on its `inputs` and applied at the next block boundary."""

    def send(self, event: dict[str, Any]) -> dict[str, Any]:
        """Queue one input event ({"type": "prompt", "text": ...}, {"type": "action", "name": ...}, ...)."""
        return self.inputs.put(event)

    def switch_prompt(self, text: str) -> None:
        self.send({"type": "prompt", "text": text})

    def act(self, name: str) -> None:
        self.send({"type": "action", "name": name})

    def control(
        self,
        keys: Iterable[str] | None = None,
        mouse: tuple[float, float] | None = None,
        look: tuple[float, float] | None = None,
    ) -> None:
        """Keyboard/mouse models: the keys held now, a held per-frame mouse (pitch, yaw), pointer pixels moved.

        Applies from the next block boundary; see `LiveControls` for how a block's state is formed.
        """
        event: dict[str, Any] = {"type": "control"}
        if keys is not None:
            event["keys"] = list(keys)
        if mouse is not None:
            event["mouse"] = list(mouse)
        if look is not None:
            event["look"] = list(look)
        self.send(event)

    def pause(self) -> None:
        self.send({"type": "pause"})

    def resume(self) -> None:
        self.send({"type": "resume"})

    def stop(self) -> None:
        self.send({"type": "stop"})


class BranchHere:
    """ "Branch here" for `InteractiveSession`: it uses the session's stream, prompt, encoder, sinks and logs."""

    def start_branching(self) -> None:
        """No branch yet (called by the session's __init__)."""
        self._branch: LiveBranch | None = None
        self._branch_labels: list[str] = []
        self._branch_action: torch.Tensor | None = None
        self._branch_actions: list[torch.Tensor | None] = []  # each branched block's action, for the kept history

    @property
    def branching(self) -> bool:
        return self._branch is not None

    def branch(self, futures: list[str | None]) -> bool:
        """Fork the stream here into futures (a prompt each, None = the current prompt) shown side by side.

        The futures share the stream's KV pages copy-on-write and run as one batch per block, all with the
        actions the session receives, until `pick()`. Future 0 with None continues the stream's own noise
        (the future that would have come); the others draw from seed + 1 + i + 100 × the branch block.
        Only sinks with `shows_branches` (the live view) see the side-by-side frames; the others get the
        kept future's frames when it is picked. Returns False (logged) where branching is not possible.
        """
        if self._branch is not None:
            log.warning("already branched at block %d; pick a future first", self.state.next_block)
            return False
        try:
            check_branchable(self.pipeline)  # Matrix-Game: refused with the reason, the stream goes on
        except ConfigError as exc:
            log.warning("cannot branch here: %s", exc)
            return False
        futures = list(futures)[:MAX_FUTURES]
        if not futures:
            log.warning("a branch needs at least one future; ignored")
            return False
        block = self.state.next_block
        futs = []
        for i, text in enumerate(futures):
            seed = None if i == 0 and text is None else self.seed + 1 + i + 100 * block
            futs.append(Future(context=None if text is None else self._encode(text), seed=seed,
                               actions=lambda start, n: self._branch_action, name=text or self.prompt))  # fmt: skip
        try:
            self._branch = LiveBranch(self.pipeline, self.state, futs, self._stream.decoder)
        except ConfigError as exc:  # e.g. an offloaded or quantized cache: say so, keep streaming
            log.warning("cannot branch here: %s", exc)
            return False
        self._branch_labels = [f.name for f in futs]
        self._branch_actions = []
        log.info("branched at block %d into %d futures: %s", block, len(futs), self._branch_labels)
        return True

    def pick(self, index: int) -> bool:
        """Keep future `index` (−1: none, the stream goes on as before the branch); False if not branching."""
        if self._branch is None:
            log.warning("no futures to pick from (send a branch first)")
            return False
        branch, self._branch = self._branch, None
        if index < 0:
            branch.drop()
            log.info("kept none of the futures; the stream goes on from block %d", self.state.next_block)
            return True
        if index >= branch.num_futures:
            log.warning("future %d does not exist (there are %d); kept none", index, branch.num_futures)
            branch.drop()
            return False
        state, decoder, fork, frames = branch.pick(index)
        if self._history_frames and not isinstance(state.cache, RingKVCache):  # "window_reset" relabels a ring only
            plain = to_plain_stream(self.pipeline, state)
            release_stream(state)
            state = plain
            log.info("the kept future's pages copied back into a ring cache (its re-caches rewrite the sink slots)")
        self.state = state
        if decoder is not None:
            self._stream.decoder = decoder
        if fork.future.context is not None:
            self._context, self.prompt = fork.future.context, self._branch_labels[index]
            self.prompt_log.append((fork.state.next_block - len(fork.blocks), self.prompt))
        n = self.pipeline.sampling.block_frames
        for k, (latents, action) in enumerate(zip(fork.blocks, self._branch_actions, strict=True)):
            self._remember(fork.origin_frame + k * n, latents, action)
        for block_index, f in frames:  # what the other sinks have not seen yet
            for sink in self.sinks:
                if not getattr(sink, "shows_branches", False):
                    sink.write(f, block_index)
        log.info("kept future %d (%s) of %d", index, self._branch_labels[index], len(self._branch_labels))
        return True

    def _branch_step(self, name: str | None, action: torch.Tensor | None) -> SessionBlock:
        self._branch_action = action
        t0 = time.perf_counter()
        outs, frames = self._branch.step()
        seconds = time.perf_counter() - t0
        self._branch_actions.append(action)
        self._last_action = name if name is not None else self._last_action
        self.action_log.append(name)
        side = None if frames is None else np.concatenate(frames, axis=2)  # futures left to right
        if side is not None:
            for sink in self.sinks:
                if getattr(sink, "shows_branches", False):
                    sink.write(side, outs[0].index)
        latents = torch.cat([o.latents for o in outs])  # (N, n, C, h, w): one row per future
        return SessionBlock(outs[0].index, outs[0].start_frame, latents, side, name, self.prompt, False,
                            seconds, 0.0, 0.0)  # fmt: skip


__all__ = ["MAX_FUTURES", "BranchHere", "QueuedInputs", "SessionBlock"]
