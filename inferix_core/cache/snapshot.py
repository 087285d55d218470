"""KV-cache snapshots: every tensor and counter a cache carries between calls, and back.

Why: a world state that is saved and resumed must continue bitwise as if never stopped, and attention
sums over keys in slot order, so the restored cache must put every frame in the same slot, not just
hold the same frames. A snapshot therefore records the buffers whole (slot layout included) plus the
host-side bookkeeping (ring origin, page table, pool free list and reference counts); the per-call
indices are rebuilt by the next `begin()`. One function pair per kind, chosen by the cache's class.

Kinds without a snapshot yet (offload, quantized pages) raise ConfigError naming what to use instead.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from ..errors import ConfigError
from .paged import DenseStore, PagedKVCache
from .ring import RingKVCache
from .shots import ShotSinkKVCache
from .spec import KVCacheConfig, KVCacheSpec

Snapshot = tuple[dict[str, torch.Tensor], dict[str, Any]]  # tensors, JSON-able bookkeeping

_COUNTERS = ("end_frame", "num_evictions", "num_eviction_events", "num_calls")


def _buffers(prefix: str, ks: list[torch.Tensor], vs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {f"{prefix}k.{i}": k for i, k in enumerate(ks)}
    out.update({f"{prefix}v.{i}": v for i, v in enumerate(vs)})
    return out


def _load_buffers(prefix: str, ks: list[torch.Tensor], vs: list[torch.Tensor], tensors: dict) -> None:
    """Copy saved buffers into the leading slots of this cache's (equal or larger) buffers."""
    for i, (k, v) in enumerate(zip(ks, vs, strict=True)):
        for dst, src in ((k, tensors[f"{prefix}k.{i}"]), (v, tensors[f"{prefix}v.{i}"])):
            if src.shape[0] != dst.shape[0] or src.shape[2:] != dst.shape[2:] or src.shape[1] > dst.shape[1]:
                raise ConfigError(f"saved KV buffer {tuple(src.shape)} does not fit this cache's {tuple(dst.shape)}")
            dst[:, : src.shape[1]].copy_(src)


def _ring_snapshot(cache: RingKVCache) -> Snapshot:
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(kind="ring", window_origin=cache.window_origin, capacity_frames=cache.capacity_frames)
    return _buffers("", cache.k, cache.v), meta


def _ring_restore(cache: RingKVCache, tensors: dict, meta: dict) -> None:
    if meta["capacity_frames"] > cache.capacity_frames:  # a global cache that had grown
        cache._grow(meta["capacity_frames"])
    _load_buffers("", cache.k, cache.v, tensors)
    for c in _COUNTERS:
        setattr(cache, c, meta[c])
    cache.window_origin = meta["window_origin"]


def _shot_snapshot(cache: ShotSinkKVCache) -> Snapshot:
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(
        kind="shot_sink", order=list(cache._order), slots=[[f, s] for f, s in cache._slot.items()],
        free=list(cache._free), pin_position=cache.pin_position, pin_frames=cache.pin_frames, num_pins=cache.num_pins,
    )  # fmt: skip
    return _buffers("", cache.k, cache.v), meta


def _shot_restore(cache: ShotSinkKVCache, tensors: dict, meta: dict) -> None:
    _load_buffers("", cache.k, cache.v, tensors)
    for c in _COUNTERS:
        setattr(cache, c, meta[c])
    cache._order = [int(f) for f in meta["order"]]
    cache._slot = {int(f): int(s) for f, s in meta["slots"]}
    cache._free = [int(s) for s in meta["free"]]
    cache.pin_position, cache.pin_frames, cache.num_pins = meta["pin_position"], meta["pin_frames"], meta["num_pins"]


def _paged_snapshot(cache: PagedKVCache) -> Snapshot:
    if type(cache.store) is not DenseStore:
        raise ConfigError(
            f"saving a world state with the '{cache.store.kind}' KV cache is not supported yet; "
            "run with offload='off' and quantization='none' (ring or paged) to save it"
        )
    pool = cache.pool
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(
        kind="paged",
        window_origin=cache.window_origin,
        num_pages=pool.num_pages,
        ref_counts=[p.ref_cnt for p in pool.pages],
        free=list(pool._free),
        pool_counters=[pool.num_allocations, pool.num_frees, pool.peak_used],
        table=[[lp, pid] for lp, pid in cache.table.pages.items()],  # insertion order kept
    )
    return _buffers("store.", cache.store.k, cache.store.v), meta


def _paged_restore(cache: PagedKVCache, tensors: dict, meta: dict) -> None:
    if meta["num_pages"] > cache.pool.num_pages:
        cache._grow(meta["num_pages"])
    _load_buffers("store.", cache.store.k, cache.store.v, tensors)
    pool = cache.pool
    refs = meta["ref_counts"]
    for page in pool.pages:  # pages beyond the saved pool (a fresh pool planned larger) stay free
        page.ref_cnt = refs[page.page_id] if page.page_id < len(refs) else 0
    pool._free = deque(meta["free"] + list(range(len(refs), pool.num_pages)))
    pool.num_allocations, pool.num_frees, pool.peak_used = meta["pool_counters"]
    cache.table.pages = {lp: pid for lp, pid in meta["table"]}
    for c in _COUNTERS:
        setattr(cache, c, meta[c])
    cache.window_origin = meta["window_origin"]
    cache.plan = None


def snapshot_cache(cache) -> Snapshot:
    """Tensors (on their device) and bookkeeping of `cache`; see the module docstring."""
    if type(cache) is RingKVCache:
        return _ring_snapshot(cache)
    if type(cache) is ShotSinkKVCache:
        return _shot_snapshot(cache)
    if type(cache) is PagedKVCache:
        return _paged_snapshot(cache)
    kind = getattr(getattr(cache, "store", None), "kind", type(cache).__name__)
    raise ConfigError(
        f"saving a world state with the '{kind}' KV cache is not supported yet; "
        "run with offload='off' and quantization='none' (ring or paged) to save it"
    )


def restore_cache(cache, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Write a snapshot into a fresh cache built from the same KVCacheConfig and KVCacheSpec."""
    kinds = {RingKVCache: "ring", PagedKVCache: "paged", ShotSinkKVCache: "shot_sink"}
    kind = kinds.get(type(cache))
    if kind != meta.get("kind"):
        raise ConfigError(f"the saved KV cache is '{meta.get('kind')}' but this run builds a '{kind}' cache")
    {"ring": _ring_restore, "paged": _paged_restore, "shot_sink": _shot_restore}[kind](cache, tensors, meta)


def cache_identity(config: KVCacheConfig, spec: KVCacheSpec) -> dict[str, Any]:
    """The settings a snapshot only fits: a state from other settings is refused with these named."""
    return {
        "window_frames": config.window_frames,
        "sink_frames": config.sink_frames,
        "page_frames": config.page_frames,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "head_dim": spec.head_dim,
        "frame_tokens": spec.frame_tokens,
        "block_frames": spec.block_frames,
        "batch_size": spec.batch_size,
        "dtype": str(spec.dtype).removeprefix("torch."),
    }
