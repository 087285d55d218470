"""Re-caching: the resident frames' K/V re-written under the prompt now in force, after a prompt switch.

"window" is LongLive's own re-cache (one context pass over the resident frames after the sink); "blocks" runs the
context pass again over every resident block, sink blocks first, in their original boundaries and with their
original actions. Both take the clean blocks as (start frame, latents (B, n, C, H, W), action or None) and leave
the same frames resident.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError

Blocks = list[tuple[int, torch.Tensor, torch.Tensor | None]]
RECACHE_STYLES = ("window", "blocks")


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
    where = {start + i: (x, a, i) for start, x, a in blocks for i in range(x.shape[1])}
    frames = list(range(first, end))
    if not set(frames) <= set(resident) or not set(frames) <= set(where):
        raise ConfigError(  # an invariant of the callers (they keep the resident blocks), not a user mistake
            f"re-cache needs the clean frames {first}..{end - 1}, resident and given; the cache holds "
            f"{resident}, the blocks cover {sorted(where)}"
        )
    latents = torch.cat([where[f][0][:, where[f][2] : where[f][2] + 1] for f in frames], dim=1)
    actions = None
    if all(where[f][1] is not None for f in frames):
        actions = torch.cat([where[f][1][:, where[f][2] : where[f][2] + 1] for f in frames], dim=1)
    pipe.context_pass(state, latents, first, actions)
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
    """Re-cache in `style` ("window" or "blocks"); returns the first frame re-written. Either style leaves the
    same frames resident and the cache's end where the stream is: checked here, once for both."""
    styles = {"window": recache_window, "blocks": recache_blocks}
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
