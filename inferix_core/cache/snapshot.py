"""KV-cache snapshots for world files: every tensor and counter a cache carries between calls, and back.

Why: a world state that is saved and resumed must continue bitwise as if never stopped, and attention
sums over keys in slot order, so the restored cache must put every frame in the same slot, not just
hold the same frames. Each cache kind writes its own `state_dict()` (buffers whole, slot layout included,
plus host-side bookkeeping: ring origin, page table, pool free list and reference counts) and reads it back
with `load_state_dict()`; the per-call indices are rebuilt by the next `begin()`:

* ring (`RingKVCache`, and `ShotSinkKVCache` with its frame order and pinned shot sink);
* paged (`PagedKVCache`): the page store's buffers and the page table and pool;
* offload (pages of cold layers in host memory): saved as the paged store it equals, i.e. with the
  block buffers' not yet written-back frames placed into their host pages, so a state saved with
  offload resumes with or without it (the two read the same slots in the same order, bitwise);
* quant (int8/int4 pages): codes, scales and zeros of every page plus the full-precision sink and
  residual ring; frames still queued for quantization are quantized first, as the next call would;
* Matrix-Game's `ActionKVCache` (main cache + mouse and keyboard rings) is three of these, composed by
  world_state.py (the wrapper lives in the models layer, above this one).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError
from .paged import PagedKVCache
from .ring import RingKVCache
from .spec import KVCacheConfig, KVCacheSpec
from .state import Snapshot

__all__ = ["Snapshot", "cache_identity", "restore_cache", "snapshot_cache"]


def _saves_state(cache) -> bool:
    # the kinds whose state_dict() is the whole state (an arena stream shares pages with others: refused)
    return isinstance(cache, RingKVCache | PagedKVCache)


def snapshot_cache(cache, prefix: str = "") -> Snapshot:
    """Tensors (on their device, names under `prefix`) and bookkeeping of `cache`: its own `state_dict()`."""
    if not _saves_state(cache):
        raise ConfigError(f"saving a world state with a {type(cache).__name__} KV cache is not supported")
    return cache.state_dict(prefix)


def restore_cache(cache, tensors: dict[str, torch.Tensor], meta: dict[str, Any], prefix: str = "") -> None:
    """Write a snapshot into a fresh cache built from the same KVCacheConfig and KVCacheSpec."""
    kind = cache.state_kind if _saves_state(cache) else type(cache).__name__
    if kind != meta.get("kind"):
        hint = ""
        if meta.get("kind") == "paged" and kind == "ring":
            hint = f"; set page_frames (the saved cache had pages of {meta.get('page_frames', '?')} frames)"
        raise ConfigError(f"the saved KV cache is '{meta.get('kind')}' but this run builds a '{kind}' cache{hint}")
    cache.load_state_dict(tensors, meta, prefix)


def cache_identity(config: KVCacheConfig, spec: KVCacheSpec, cache=None) -> dict[str, Any]:
    """The settings a snapshot only fits: a state from other settings is refused with these named.

    Offload (and the GPU budget that decides it) is absent on purpose: the offloaded cache reads the
    same slots in the same order as the resident paged one, so a state moves between them bitwise.
    `page_frames` is the built cache's (a paged cache with page_frames=0 pages by block; a ring has 0).
    """
    quant = config.quantization != "none"
    main = getattr(cache, "main", cache)  # Matrix-Game's ActionKVCache wraps the main cache
    return {
        "window_frames": config.window_frames,
        "sink_frames": config.sink_frames,
        "page_frames": main.page_frames if isinstance(main, PagedKVCache) else config.page_frames,
        "quantization": config.quantization,
        "residual_frames": config.residual_frames if quant else None,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "head_dim": spec.head_dim,
        "frame_tokens": spec.frame_tokens,
        "block_frames": spec.block_frames,
        "batch_size": spec.batch_size,
        "dtype": str(spec.dtype).removeprefix("torch."),
    }
