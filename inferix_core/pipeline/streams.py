"""Streams whose KV pages live in a shared arena (branching's futures, many independent streams): open one, adopt a
plain stream into an arena, copy one back out to a cache of its own, release its pages. Bitwise what a plain
`PagedKVCache` of the same settings gives (cache/shared.py)."""

from __future__ import annotations

import dataclasses
import logging

import torch

from ..cache import create_kv_cache
from ..cache.paged import planned_pages
from ..cache.shared import PageArena, StreamKVCache
from ..cache.spec import KVCacheSpec
from ..errors import ConfigError, ShapeMismatchError
from ..parallel import head_shards
from ..tensors import to_device_async
from .block_diffusion import BlockDiffusionPipeline, SeededNoise, StreamState

log = logging.getLogger(__name__)


def stream_spec(pipe: BlockDiffusionPipeline, latent_height: int, latent_width: int) -> KVCacheSpec:
    """The KV spec of one batch-1 stream of `pipe` at this latent size (what a PageArena is built for)."""
    cfg = pipe.model.config
    return KVCacheSpec(
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads // head_shards(pipe.model),
        head_dim=cfg.head_dim,
        frame_tokens=cfg.frame_tokens(latent_height, latent_width),
        block_frames=pipe.sampling.block_frames,
        batch_size=1,
        dtype=pipe.dtype,
        device=pipe.device,
    )


def new_arena(
    pipe: BlockDiffusionPipeline,
    latent_height: int,
    latent_width: int,
    num_pages: int | None = None,
    *,
    streams: int = 1,
    max_frames: int | None = None,
) -> PageArena:
    """An empty PageArena for `pipe`'s cache settings at this latent size; it grows (logged) as streams need.

    Sized `num_pages`, or else for `streams` streams of `max_frames` latent frames each (a global cache's
    run length; a window needs none), so a known workload never grows the buffers mid-run.
    """
    spec = stream_spec(pipe, latent_height, latent_width)
    if num_pages is None:
        num_pages = streams * planned_pages(pipe.cache_config, dataclasses.replace(spec, max_frames=max_frames))
    return PageArena(pipe.cache_config, spec, num_pages)


def start_stream(
    pipe: BlockDiffusionPipeline,
    context: torch.Tensor,
    latent_height: int,
    latent_width: int,
    *,
    seed: int = 0,
    arena: PageArena | None = None,
    noise=None,
    image_context: torch.Tensor | None = None,
) -> StreamState:
    """A fresh batch-1 stream whose pages live in `arena` (a new one when None): forkable and batchable.

    It runs through `pipe.denoise_block` like any stream, continuing exactly as a paged-cache stream
    of the same settings would.
    """
    if context.shape[0] != 1:
        raise ShapeMismatchError(f"a stream takes one prompt (1, L, D); got {tuple(context.shape)}")
    if arena is None:
        arena = new_arena(pipe, latent_height, latent_width)
    elif arena.spec != stream_spec(pipe, latent_height, latent_width):
        raise ConfigError(
            "this page arena was built for another model or latent size; a stream at "
            f"{latent_height}×{latent_width} latents needs its own arena"
        )
    image = () if image_context is None else (to_device_async(image_context, pipe.device),)  # Wan 2.1 I2V's CLIP tokens
    text = pipe.model.prepare_context(to_device_async(context, pipe.device), *image)
    noise = noise if noise is not None else SeededNoise(seed)
    return StreamState(arena.new_stream(), text, noise, latent_height, latent_width, 1)


def adopt_stream(pipe: BlockDiffusionPipeline, state: StreamState, arena: PageArena | None = None) -> StreamState:
    """The same stream with its KV cache moved into a page arena (copied once), so it can branch or batch.

    For a stream from `pipe.start_stream` or `load_world_state` (a ring or paged cache); the state's
    prompt K/V, noise and position are kept. A stream already in an arena is returned as is.
    """
    if isinstance(state.cache, StreamKVCache):
        return state
    if state.batch_size != 1:
        raise ConfigError(f"only a batch-1 stream can be branched; this one has batch {state.batch_size}")
    if state.first_latent is not None or state.clean_prefix is not None:
        raise ConfigError("a stream with KV recompute or clean first latents cannot be moved into a page arena yet")
    arena = arena or new_arena(pipe, state.latent_height, state.latent_width)
    cache = arena.adopt(state.cache)
    return carry_position(state, StreamState(cache, state.text, state.noise, state.latent_height, state.latent_width,
                                             1, state.next_frame, state.next_block))  # fmt: skip


def to_plain_stream(pipe: BlockDiffusionPipeline, state: StreamState) -> StreamState:
    """The same stream with its live frames copied out of the arena into the cache `pipe` builds by itself
    (ring or paged): the inverse of `adopt_stream`, e.g. to save a kept fork with `save_world_state`.

    The frames are written back through the cache's own begin()/update() in their contiguous runs (sink
    frames, then the window), so the copy attends to the same frames; a ring cache may order its slots
    differently from the arena, which changes sums in the last bits only.
    """
    if not isinstance(state.cache, StreamKVCache):
        return state
    src = state.cache
    src._check_live()
    spec = dataclasses.replace(src.spec, max_frames=src.end_frame if pipe.cache_config.is_global else None)
    cache = create_kv_cache(pipe.cache_config, spec)
    frames = src.resident_frames()
    runs: list[list[int]] = []
    for f in frames:
        if runs and runs[-1][-1] + 1 == f:
            runs[-1].append(f)
        else:
            runs.append([f])
    for run in runs:
        if run[0] > cache.end_frame:
            cache.restart(run[0])
        cache.begin(run[0], len(run))
        slots = src.frame_slots(run)
        for layer in range(spec.num_layers):
            cache.layer(layer).update(*src.store.read_frames(layer, run, slots))
    if cache.resident_frames() != frames or cache.end_frame != src.end_frame:
        raise ConfigError(  # an invariant of the copy, not a user mistake
            f"copying the stream out of its arena left frames {cache.resident_frames()} (end {cache.end_frame}); "
            f"expected {frames} (end {src.end_frame})"
        )
    return carry_position(state, StreamState(cache, state.text, state.noise, state.latent_height, state.latent_width,
                                             1, state.next_frame, state.next_block))  # fmt: skip


def carry_position(source: StreamState, state: StreamState) -> StreamState:
    """`state` with `source`'s shots and RoPE offset (LongLive 2.0) and the history it keeps: a copy of a stream in
    another cache (adopted, copied out, forked) continues at the same positions."""
    state.shot_index, state.rope_offset = source.shot_index, source.rope_offset
    state.history_frames = source.history_frames
    return state


def clone_noise(noise) -> SeededNoise:
    """A copy of a SeededNoise that draws what the original would draw next (a fork that keeps the seed)."""
    if not isinstance(noise, SeededNoise):
        raise ConfigError(f"a fork without its own seed copies the parent's SeededNoise, not {type(noise).__name__}")
    out = SeededNoise(0, device=noise.device)
    out.generator.set_state(noise.generator.get_state())
    out._upfront = noise._upfront
    return out


def release_stream(state: StreamState) -> None:
    """Drop a stream's page references (e.g. the parent once its forks are what goes on)."""
    if isinstance(state.cache, StreamKVCache):
        state.cache.release()
