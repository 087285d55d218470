"""Timed schedules: prompts and actions that change at given seconds, mapped to block boundaries.

A block covers block_frames latent frames = block_frames·temporal_compression pixel frames, so a time t
lands on block round(t / seconds_per_block). Framework-free; used by the API, the nodes and the CLI.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .models.registry import WorldModel
from .pipeline import SamplingConfig

log = logging.getLogger(__name__)


def seconds_per_block(world_model: WorldModel, sampling: SamplingConfig | None = None) -> float:
    """Video seconds one block covers: latent frames × VAE temporal stride / fps.

    The one place seconds meet blocks: schedules, `seconds_to_blocks` and the nodes all use it, so a
    prompt at 5 s and a 5 s video agree on where 5 s is.
    """
    sampling = sampling or world_model.sampling
    return sampling.block_frames * world_model.temporal_compression / world_model.fps


def seconds_to_blocks(world_model: WorldModel, seconds: float, sampling: SamplingConfig | None = None) -> int:
    """Whole blocks that cover `seconds` of video (rounded up, at least 1)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"seconds must be a positive number, got {seconds}")
    return max(1, math.ceil(seconds / seconds_per_block(world_model, sampling) - 1e-9))


def block_at(seconds: float, block_s: float) -> int:
    """The block a schedule entry at `seconds` starts in: the nearest block boundary (LongLive switches there)."""
    return round(seconds / block_s)


def _check_times(times: list[float], what: str) -> None:
    if not times or times[0] != 0:
        raise ConfigError(f"a {what} schedule must start with an entry at 0 seconds")
    if times != sorted(times) or len(set(times)) != len(times):
        raise ConfigError(f"{what} schedule times must be strictly increasing, got {times}")


@dataclass(frozen=True)
class PromptSchedule:
    """Prompt changes at given times: [(seconds, prompt), ...], the first at 0."""

    entries: tuple[tuple[float, str | torch.Tensor], ...]

    def __post_init__(self) -> None:
        _check_times([t for t, _ in self.entries], "prompt")

    def switch_blocks(self, num_blocks: int, block_s: float) -> list[int]:
        """Block index of every entry after the first; raises before any model work if one starts too late."""
        blocks = []
        for t, _ in self.entries[1:]:
            block = block_at(t, block_s)
            if block >= num_blocks:
                raise ConfigError(
                    f"prompt at {t:g} s starts after the video ends ({num_blocks * block_s:.2f} s, "
                    f"{num_blocks} blocks); add blocks or move the prompt earlier"
                )
            blocks.append(max(block, 1))
        return blocks


@dataclass(frozen=True)
class ActionSchedule:
    """Actions over time: [(seconds, action name), ...], the first at 0; each holds until the next.

    Actions switch at block boundaries (the nearest one, as prompts do): a block is the smallest unit the
    model is conditioned on in the interactive session too. Entries that start after the video ends are
    dropped with a log line (a script of controls may be longer than the clip asked for).
    """

    entries: tuple[tuple[float, str], ...]

    def __post_init__(self) -> None:
        _check_times([t for t, _ in self.entries], "action")

    def per_block(self, world_model: WorldModel, num_blocks: int, sampling: SamplingConfig | None = None) -> list[str]:
        """One action name per block; unknown names raise with the model's list."""
        names = world_model.action_names
        if not names:
            raise ConfigError("this model takes no named actions; disconnect the action schedule")
        unknown = sorted({a for _, a in self.entries if a not in names})
        if unknown:
            raise ConfigError(f"unknown actions {unknown}; this model knows {list(names)}")
        block_s = seconds_per_block(world_model, sampling)
        starts = [block_at(t, block_s) for t, _ in self.entries]
        late = [t for (t, _), b in zip(self.entries, starts) if b >= num_blocks]
        if late:
            log.info("actions from %g s on start after the video ends (%d blocks); ignored", late[0], num_blocks)
        out, k = [], 0
        for block in range(num_blocks):
            while k + 1 < len(starts) and starts[k + 1] <= block:
                k += 1
            out.append(self.entries[k][1])
        return out
