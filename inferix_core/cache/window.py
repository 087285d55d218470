"""The window bookkeeping ring and paged caches share: restarting the write position for a re-cache."""

from __future__ import annotations

from ..errors import ConfigError


def restart_window(cache, start_frame: int) -> None:
    """Move `cache`'s write position to `start_frame`, treating the frames skipped as evicted.

    `cache` is a RingKVCache or a paged cache: it has `config`, `end_frame`, `sink_frames`,
    `resident_frames()`, `_ring_origin` and `num_evictions`. Each class's `restart` docstring says how
    its storage follows the new origin.
    """
    if cache.config.is_global:
        raise ConfigError("a global KV cache keeps every frame, so it cannot skip frames; write them in order")
    if start_frame < cache.end_frame:
        raise ConfigError(f"restart({start_frame}) would go back: frames up to {cache.end_frame} are cached")
    if cache.end_frame < cache.sink_frames:
        raise ConfigError(
            f"restart({start_frame}) before the {cache.sink_frames} sink frames are written "
            f"(only {cache.end_frame} are); write the sink frames first"
        )
    if start_frame == cache.end_frame:
        return
    before = len(cache.resident_frames())
    cache.end_frame = start_frame
    cache._ring_origin = start_frame
    cache.num_evictions += before - len(cache.resident_frames())
