"""What a run hands out: its result, the hooks a caller plugs in, and the decode of clean blocks to frames and
sinks (in line or overlapped, chunk-exact decoders primed with their first frame alone). The facade (api.py) and
the interactive clients use these."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import ConfigError, ShapeMismatchError
from ..models.registry import WorldModel
from ..pipeline import PipelineHooks, SamplingConfig
from ..profiling import NullProfiler
from ..vae.overlap import to_uint8_frames
from ..vae.pixel_window import PixelWindowEncoder
from ..vae.streaming import StreamDecoder
from ..vae.taehv import TAEHVStreamDecoder
from ..vae.tiny_ae import TinyStreamDecoder
from .world_state import (
    WorldState,
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


def open_video_sinks(folder: str | Path, prefix: str, fps: float, *, crf: int = 18, frames_ext: str = "none") -> list:
    """An Mp4Sink at the next free `folder/prefix_NNNNN.mp4`, plus a frame folder of that name if asked.

    The mp4 is written as `…partial.mp4`, one flushed fragment per block, and renamed when closed (also on
    an interrupt), never over an existing file; so a stopped run leaves a playable file of the frames so far.
    """
    from ..sinks import Mp4Sink, unique_path
    from ..sinks.frames import FrameFolderSink

    path = unique_path(folder, prefix, "mp4")
    sinks = [Mp4Sink(path, fps, crf=crf)]
    if frames_ext != "none":
        sinks.append(FrameFolderSink(Path(folder) / path.stem, prefix="frame", ext=frames_ext))
    return sinks


class ProfiledHooks(PipelineHooks):
    """Pipeline hooks that feed a Profiler: block start, and the `denoise` / `context_pass` stages.

    The block's end is not here: the caller closes it after decoding and the sinks, so a block's wall
    time covers everything until its frames are out (what FPS should count). Shared with clients/session.py.
    """

    def __init__(self, profiler: NullProfiler, hooks: GenerationHooks | None = None):
        self.profiler, self.hooks = profiler, hooks or GenerationHooks()

    def on_block_start(self, index: int, start_frame: int) -> None:
        self.profiler.on_block_start(index)

    def stage(self, name: str) -> contextlib.AbstractContextManager:
        return self.profiler.stage(name)

    def check_interrupt(self) -> None:
        self.hooks.check_interrupt()


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


class DecodedBlock(NamedTuple):
    frames: np.ndarray  # (T, H, W, 3) uint8, batch item 0
    decode_s: float
    ready_at: float  # perf_counter() when the block's first frames were decoded (before the sinks got them)


# Stream decoders whose outputs concatenate to the same frames for any chunking of the latents (each says
# so in its docstring and its streaming tests): a block's first latent frame may be decoded on its own.
CHUNK_EXACT_DECODERS = (StreamDecoder, TinyStreamDecoder, TAEHVStreamDecoder)


def starts_its_stream(stream) -> bool:
    """Whether a chunk-exact stream decoder has decoded nothing yet (a new world, not a resumed or forked one).

    Only such a stream's first block is split: the frames are equal up to float rounding, not bitwise, so a
    resumed world (whose decoder goes on from saved state) decodes its blocks whole, exactly as the
    uninterrupted run decoded them there.
    """
    if not isinstance(stream, CHUNK_EXACT_DECODERS):
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
    (`starts_its_stream`), the first latent frame is decoded and handed to the sinks on its own before the
    rest of the block: the viewer sees the first frame one block-decode earlier, and the frames are the same
    up to float rounding (the sinks get the block in two writes).
    """
    split = first_frame_alone and latents.shape[1] > 1 and starts_its_stream(stream)
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
