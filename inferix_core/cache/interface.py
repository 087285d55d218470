"""The KV-cache seam: what the transformer and the pipeline may call, and the one per-layer view.

Every kind (ring, paged, offload, quant; cache/factory.py) satisfies `KVCache`. An attention layer sees
only `cache.layer(i)`, a `LayerKV`, and calls `update(k, v)` once per transformer call; the pipeline
calls `begin()` before each call and `reset()` / `restart()` between runs and re-caches. All bookkeeping
is host-side Python integers (no device → host sync in a step).
"""

from __future__ import annotations

import weakref
from typing import Protocol, runtime_checkable

import torch

from .spec import KVCacheConfig, KVCacheSpec


class _WritesAndReads(Protocol):
    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class LayerKV:
    """The per-layer view handed to an attention layer for one transformer call (every cache kind)."""

    __slots__ = ("_cache", "index")

    def __init__(self, cache: _WritesAndReads, index: int):
        # a weak proxy: the cache owns its views, and a strong back-reference would make a cycle that
        # keeps gigabytes of K/V alive after the run until the garbage collector happens to run
        self._cache = weakref.proxy(cache)
        self.index = index

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this call's K/V (B, n, H, D) and return the attention span (B, L, H, D), sink frames first."""
        return self._cache.write_and_read(self.index, k, v)


@runtime_checkable
class KVCache(Protocol):
    """One run's KV cache: the contract of docs/architecture.md ("Contracts") and docs/kv_cache.md."""

    config: KVCacheConfig
    spec: KVCacheSpec
    end_frame: int  # frames [0, end_frame) have been written at least once
    num_calls: int
    num_evictions: int  # frames dropped from the window, counted once per frame
    num_eviction_events: int  # calls that dropped frames (the reference's eviction-branch count)

    def begin(self, start_frame: int, num_frames: int) -> None:
        """Plan a transformer call over frames [start_frame, start_frame + num_frames)."""
        ...

    def layer(self, index: int) -> LayerKV: ...

    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What `layer(i).update(k, v)` does: store the call's K/V, return the attention span."""
        ...

    def reset(self) -> None:
        """Forget every frame (storage is kept and overwritten)."""
        ...

    def restart(self, start_frame: int) -> None:
        """Continue writing at `start_frame`, frames [end_frame, start_frame) counting as evicted (re-cache)."""
        ...

    def resident_frames(self) -> list[int]:
        """Absolute frame indices attended to by the next call, sink frames first, then oldest to newest."""
        ...

    def logical_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of `layer` in resident_frames() order (the reference's buffer order), for inspection."""
        ...

    def stats(self) -> dict: ...

    @property
    def attended_tokens(self) -> int:
        """Tokens the last call attended to (the reference's local_end)."""
        ...
