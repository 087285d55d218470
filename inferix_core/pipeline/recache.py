"""Re-caching: the resident frames' K/V re-written under the prompt now in force, after a prompt switch.

"window" is LongLive's own re-cache with their `global_sink: true` (one context pass over the resident frames
after the sink); "window_reset" theirs with `global_sink: false` (the cache reset, one pass over the last
window_frames frames that re-writes the sink slots too: docs/longlive_global_sink.md); "blocks" runs the
context pass again over every resident block, sink blocks first, in their original boundaries and with their
original actions. They take the clean blocks as (start frame, latents (B, n, C, H, W), action or None) and leave
the same frames resident.
"""

from __future__ import annotations

from typing import Any

import torch

from ..cache.factory import cache_kind
from ..cache.ring import RingKVCache
from ..errors import ConfigError

Blocks = list[tuple[int, torch.Tensor, torch.Tensor | None]]
RECACHE_STYLES = ("window", "window_reset", "blocks")


def history_frames(style: str, cache_config) -> int:
    """The frames a stream's history must keep beyond the resident ones for re-caches of `style`: a
    "window_reset" re-writes the last window_frames frames, some of them already out of the window."""
    if style == "window_reset" and not cache_config.is_global and cache_config.sink_frames:
        return cache_config.window_frames
    return 0


def check_style(style: str, cache_config) -> None:
    """Refuse, before any model work, a re-cache style the cache cannot run: "window_reset" relabels the ring
    cache's sink slots, so (with a window and a sink) it needs the ring, not paged, offloaded or quantized pages."""
    if style not in RECACHE_STYLES:
        raise ConfigError(f"recache_style '{style}' is not one of {', '.join(RECACHE_STYLES)}")
    if history_frames(style, cache_config) and cache_kind(cache_config) != "ring":
        raise _needs_ring(cache_kind(cache_config))


def _needs_ring(kind: str) -> ConfigError:
    """The refusal of a "window_reset" re-cache on a cache that cannot relabel its sink slots."""
    return ConfigError(
        f"LongLive's global_sink: false re-cache ('window_reset') runs on the ring KV cache, not the {kind} one: "
        "set page_frames 0, offload 'off' and quantization 'none', or use global_sink: true (recache_style 'window')"
    )


def _covered(blocks: Blocks) -> list[int]:
    """The frames `blocks` hold clean latents of, in order."""
    return sorted({start + i for start, x, _ in blocks for i in range(x.shape[1])})


def _clean_frames(blocks: Blocks, frames: list[int]) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The clean latents (B, len(frames), C, H, W) and actions of `frames` from `blocks`; None if one is missing."""
    where = {start + i: (x, a, i) for start, x, a in blocks for i in range(x.shape[1])}
    if not set(frames) <= set(where):
        return None
    latents = torch.cat([where[f][0][:, where[f][2] : where[f][2] + 1] for f in frames], dim=1)
    actions = None
    if all(where[f][1] is not None for f in frames):
        actions = torch.cat([where[f][1][:, where[f][2] : where[f][2] + 1] for f in frames], dim=1)
    return latents, actions


def recache_window(pipe: Any, state: Any, blocks: Blocks) -> int:
    """LongLive's KV re-cache under the prompt now in `state`; returns the first frame re-written.

    NVlabs/LongLive v1.0 `_recache_after_switch` (pipeline/interactive_causal_inference.py, with their
    `global_sink: true`): one context pass (t = context_noise) over the clean latents of the resident
    frames after the sink, which attend to the sink's cached K/V and to each other with no causal mask
    and overwrite their own K/V; the sink keeps its K/V. While nothing has been evicted the pass covers
    every frame from 0, the sink included. `blocks` are (start frame, clean latents (B, n, C, H, W),
    action (B, n, A) or None) covering at least the resident frames.
    """
    pipe.settle(state)  # the last block stream() handed out: its K/V are among those re-written
    cache, end = state.cache, state.next_frame
    resident = cache.resident_frames()
    if not resident or not blocks:
        return end
    sink = getattr(cache, "sink_frames", 0)
    first = 0 if resident == list(range(end)) else min(f for f in resident if f >= sink)
    frames = list(range(first, end))
    clean = _clean_frames(blocks, frames)
    if not set(frames) <= set(resident) or clean is None:
        raise ConfigError(  # an invariant of the callers (they keep the resident blocks), not a user mistake
            f"re-cache needs the clean frames {first}..{end - 1}, resident and given; the cache holds "
            f"{resident}, the blocks cover {_covered(blocks)}"
        )
    latents, actions = clean
    pipe.context_pass(state, latents, first, actions)
    return first


def recache_window_reset(pipe: Any, state: Any, blocks: Blocks) -> int:
    """LongLive's KV re-cache with their `global_sink: false` (docs/longlive_global_sink.md); returns the first
    frame re-written.

    NVlabs/LongLive v1.0 `_recache_after_switch` zeroes the cache and runs one context pass over the clean
    frames [r, S), r = S − min(window, S), written from slot 0 (`sink_recache_after_switch`): the sink slots take
    frames r..r+K−1 (with their own RoPE positions) and keep them until the next switch, the window the rest;
    the pass's queries see all of these frames, no mask. Here: the ring cache reset, the pass written as
    frames 0.. with RoPE positions r.. (`rope_offset`), then the slots relabelled (`RingKVCache.relabel`). With
    no sink or a global cache the setting changes nothing (`recache_window`). Needs the history of the last
    window_frames frames (`history_frames`).
    """
    cache, end = state.cache, state.next_frame
    sink = getattr(cache, "sink_frames", 0)
    if cache.config.is_global or not sink or not cache.resident_frames():
        return recache_window(pipe, state, blocks)
    if not isinstance(cache, RingKVCache):  # e.g. offload="auto" that offloads, or a stream adopted into an arena
        raise _needs_ring(type(cache).__name__)
    first = end - min(cache.config.window_frames, end)
    frames = list(range(first, end))
    clean = _clean_frames(blocks, frames)
    if clean is None:
        raise ConfigError(  # an invariant of the callers (history_frames), not a user mistake
            f"a window_reset re-cache needs the clean frames {first}..{end - 1}; the blocks cover {_covered(blocks)}"
        )
    counters = cache.num_evictions, cache.num_eviction_events, cache.num_calls
    cache.reset()
    state.rope_offset += first
    try:
        pipe.context_pass(state, clean[0], 0, clean[1])
    finally:
        state.rope_offset -= first
    cache.relabel(end, first + sink)
    cache.num_evictions, cache.num_eviction_events = counters[0], counters[1]
    cache.num_calls = counters[2] + 1
    return first


def recache_blocks(pipe: Any, state: Any, blocks: Blocks) -> int:
    """The cache reset, then the context pass over each block that still has resident frames, in order; frames
    evicted before stay evicted: after the sink blocks the cache restarts at the window's first block (every
    cache kind can skip frames, `KVCache.restart`). Returns the first frame re-written; call it through
    `recache`, which settles the stream first and checks what stays resident."""
    cache, end = state.cache, state.next_frame
    before = cache.resident_frames()
    resident = set(before)
    kept = [b for b in blocks if resident.intersection(range(b[0], b[0] + b[1].shape[1]))]
    if not kept:
        return end
    cache.reset()
    for start, latents, action in kept:
        if start > cache.end_frame:
            cache.restart(start)
        pipe.context_pass(state, latents, start, action)
    return kept[0][0]


def recache(pipe: Any, state: Any, blocks: Blocks, style: str) -> int:
    """Re-cache in `style` (RECACHE_STYLES); returns the first frame re-written. Every style leaves the same frames
    resident and the cache's end where the stream is: checked here, once for all."""
    styles = {"window": recache_window, "window_reset": recache_window_reset, "blocks": recache_blocks}
    if style not in styles:
        raise ConfigError(f"recache style must be one of {RECACHE_STYLES}, got {style!r}")
    pipe.settle(state)  # the last block handed out: its K/V are among those re-written
    cache, end = state.cache, state.next_frame
    before = cache.resident_frames()
    first = styles[style](pipe, state, blocks)
    if cache.end_frame != end or cache.resident_frames() != before:
        raise ConfigError(  # an invariant of the re-cache, not a user mistake; fail loudly rather than drift
            f"re-cache ({style}) left frames {cache.resident_frames()} resident (end {cache.end_frame}); "
            f"expected {before} (end {end})"
        )
    return first
