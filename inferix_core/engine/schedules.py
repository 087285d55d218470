"""Timed schedules: prompts and actions that change at given seconds, mapped to block boundaries.

A block covers n = block_frames latent frames. The causal VAE decodes the first latent frame to one
pixel frame and every later one to c = temporal_compression frames, so block 0 decodes to 1 + c(n − 1)
frames and every later block to c·n: block b ≥ 1 starts at pixel frame c·n·b − (c − 1), and N blocks
are c·n·N − c + 1 frames long. A time t (pixel frame t·fps) lands on the nearest block start
(`BlockTiming.block_at`). Framework-free; used by the API, the nodes and the CLI.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass

import torch

from ..controls import ActionTrack, ControlSpec, get_control_spec, parse_control
from ..errors import ConfigError
from ..models.registry import WorldModel
from ..pipeline import SamplingConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlockTiming:
    """Where each block starts in the decoded video, in pixel frames and seconds (see the module docstring)."""

    block_frames: int  # latent frames per block (n)
    temporal_compression: int  # pixel frames per latent frame after the first (c)
    fps: float

    def start_frame(self, block: int) -> int:
        """First pixel frame of `block`: 0 for block 0, c·n·b − (c − 1) after it."""
        c, n = self.temporal_compression, self.block_frames
        return 0 if block <= 0 else c * n * block - (c - 1)

    def start_seconds(self, block: int) -> float:
        return self.start_frame(block) / self.fps

    def video_seconds(self, num_blocks: int) -> float:
        """Length of the video `num_blocks` blocks decode to."""
        return self.start_frame(num_blocks) / self.fps

    def block_at(self, seconds: float) -> int:
        """The block whose start is nearest to `seconds` (LongLive switches prompts at block boundaries)."""
        frame = seconds * self.fps
        c, n = self.temporal_compression, self.block_frames
        below = max(0, math.floor((frame + c - 1) / (c * n)))
        return min((below, below + 1), key=lambda b: (abs(self.start_frame(b) - frame), -b))  # ties: the later

    def blocks_for(self, seconds: float) -> int:
        """Fewest blocks whose video lasts at least `seconds` (rounded up, at least 1)."""
        c, n = self.temporal_compression, self.block_frames
        blocks = (seconds * self.fps + c - 1) / (c * n) - 1e-9
        if not math.isfinite(blocks):  # 1e308 s overflows: more blocks than any cap, not a crash
            return sys.maxsize
        return max(1, math.ceil(blocks))


def block_timing(world_model: WorldModel, sampling: SamplingConfig | None = None) -> BlockTiming:
    """The BlockTiming of `world_model` with its (or the given) sampling: the one place seconds meet blocks."""
    sampling = sampling or world_model.sampling
    return BlockTiming(sampling.block_frames, world_model.temporal_compression, world_model.fps)


def seconds_per_block(world_model: WorldModel, sampling: SamplingConfig | None = None) -> float:
    """Video seconds one block after the first covers: latent frames × VAE temporal stride / fps.

    (The first block is c − 1 frames shorter; `block_timing` has the exact start of every block.)
    """
    sampling = sampling or world_model.sampling
    return sampling.block_frames * world_model.temporal_compression / world_model.fps


def seconds_to_blocks(world_model: WorldModel, seconds: float, sampling: SamplingConfig | None = None) -> int:
    """Whole blocks whose decoded video lasts at least `seconds` (rounded up, at least 1)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"seconds must be a positive number, got {seconds}")
    return block_timing(world_model, sampling).blocks_for(seconds)


def block_at(seconds: float, timing: BlockTiming) -> int:
    """The block a schedule entry at `seconds` starts in: the nearest block start (LongLive switches there)."""
    return timing.block_at(seconds)


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

    def switch_blocks(self, num_blocks: int, timing: BlockTiming) -> list[int]:
        """Block index of every entry after the first; raises before any model work if one starts too late."""
        blocks = []
        for t, _ in self.entries[1:]:
            block = block_at(t, timing)
            if block >= num_blocks:
                raise ConfigError(
                    f"prompt at {t:g} s starts after the video ends ({timing.video_seconds(num_blocks):.2f} s, "
                    f"{num_blocks} blocks); add blocks or move the prompt earlier"
                )
            blocks.append(max(block, 1))
        return blocks


# LongLive 2.0 marks the first block of a new shot by this prefix (NVlabs/LongLive main utils/dataset.py
# DEFAULT_SCENE_CUT_PREFIX; their pipeline's `_is_shot_boundary` tests it per block).
SCENE_CUT_PREFIX = "The scene transitions. "


def shot_entries(
    entries: list[tuple[int, str | torch.Tensor]], num_blocks: int, prefix: str = SCENE_CUT_PREFIX
) -> tuple[list[tuple[int, str | torch.Tensor]], tuple[int, ...]]:
    """Prompt switches (block, prompt) → the per-block prompts of LongLive 2.0's shot layout, and the shot blocks.

    A prompt starting with `prefix` starts a shot at its block. As their dataset lays shots out
    (utils/dataset.py `_apply_shot_durations`), only the shot's first block is conditioned on the prefixed
    text; its later blocks get the bare caption, so a second switch to the caption is added one block later.
    """
    out: list[tuple[int, str | torch.Tensor]] = []
    shots: list[int] = []
    for i, (block, text) in enumerate(entries):
        out.append((block, text))
        if isinstance(text, str) and text.startswith(prefix):
            shots.append(block)
            following = entries[i + 1][0] if i + 1 < len(entries) else num_blocks
            if block + 1 < following:
                out.append((block + 1, text[len(prefix) :]))
    return out, tuple(shots)


@dataclass(frozen=True)
class ActionSchedule:
    """Actions over time: [(seconds, action), ...], the first at 0; each holds until the next.

    An action is a model's action name (the bundled model: `per_block`), or for keyboard/mouse models
    (Matrix-Game 2.0) keys with an optional mouse, "W+A yaw=0.1" (`action_track`).

    Actions switch at block boundaries (the nearest one, as prompts do): a block is the smallest unit the
    model is conditioned on in the interactive session too. Entries that start after the video ends are
    dropped with a log line (a script of controls may be longer than the clip asked for).
    """

    entries: tuple[tuple[float, str], ...]

    def __post_init__(self) -> None:
        _check_times([t for t, _ in self.entries], "action")

    def _entry_blocks(self, num_blocks: int, timing: BlockTiming) -> list[int]:
        """The entry in force at each block (entries after the end are dropped with a log line)."""
        starts = [block_at(t, timing) for t, _ in self.entries]
        late = [t for (t, _), b in zip(self.entries, starts, strict=True) if b >= num_blocks]
        if late:
            log.info("actions from %g s on start after the video ends (%d blocks); ignored", late[0], num_blocks)
        out, k = [], 0
        for block in range(num_blocks):
            while k + 1 < len(starts) and starts[k + 1] <= block:
                k += 1
            out.append(k)
        return out

    def action_track(
        self, spec: ControlSpec | str, num_blocks: int, block_frames: int, timing: BlockTiming, stride: int = 4
    ) -> ActionTrack:
        """Keyboard/mouse rows per pixel frame for a Matrix-Game-style model (`inferix_core.controls`).

        Each entry is keys plus optional `pitch=` / `yaw=` ("W+A yaw=0.1", "none"); it fills the new rows
        of every block from the one it starts in (nearest boundary) until the next entry, as the authors'
        streaming demo fills a block's rows with one state. Bad keys raise before any model work.
        """
        spec = get_control_spec(spec)
        controls = [parse_control(spec, value) for _, value in self.entries]
        track = ActionTrack(spec, stride)
        for block, k in enumerate(self._entry_blocks(num_blocks, timing)):
            track.write_block(block * block_frames, block_frames, controls[k])
        return track

    def per_block(self, world_model: WorldModel, num_blocks: int, sampling: SamplingConfig | None = None) -> list[str]:
        """One action name per block; unknown names raise with the model's list."""
        names = world_model.action_names
        if not names:
            raise ConfigError("this model takes no named actions; disconnect the action schedule")
        unknown = sorted({a for _, a in self.entries if a not in names})
        if unknown:
            raise ConfigError(f"unknown actions {unknown}; this model knows {list(names)}")
        timing = block_timing(world_model, sampling)
        return [self.entries[k][1] for k in self._entry_blocks(num_blocks, timing)]
