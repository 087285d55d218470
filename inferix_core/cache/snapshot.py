"""KV-cache snapshots: every tensor and counter a cache carries between calls, and back.

Why: a world state that is saved and resumed must continue bitwise as if never stopped, and attention
sums over keys in slot order, so the restored cache must put every frame in the same slot, not just
hold the same frames. A snapshot therefore records the buffers whole (slot layout included) plus the
host-side bookkeeping (ring origin, page table, pool free list and reference counts); the per-call
indices are rebuilt by the next `begin()`. One function pair per kind, chosen by the cache's class:

* ring: the K/V buffers, the window origin and the counters;
* paged: the page store's buffers and the page table, pool free list and reference counts;
* offload (pages of cold layers in host memory): saved as the paged store it equals, i.e. with the
  block buffers' not yet written-back frames placed into their host pages, so a state saved with
  offload resumes with or without it (the two read the same slots in the same order, bitwise);
* quant (int8/int4 pages): codes, scales and zeros of every page plus the full-precision sink and
  residual ring; frames still queued for quantization are quantized first, as the next call would;
* Matrix-Game's `ActionKVCache` (main cache + mouse and keyboard rings) is three of these, composed by
  world_state.py (the wrapper lives in the models layer, above this one).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from ..errors import ConfigError
from .offload import OffloadStore
from .paged import DenseStore, PagedKVCache
from .quant import QuantStore
from .ring import RingKVCache
from .shots import ShotSinkKVCache
from .spec import KVCacheConfig, KVCacheSpec

Snapshot = tuple[dict[str, torch.Tensor], dict[str, Any]]  # tensors, JSON-able bookkeeping

_COUNTERS = ("end_frame", "num_evictions", "num_eviction_events", "num_calls")
_QUANT_LISTS = ("k_codes", "v_codes", "k_scale", "k_zero", "v_scale", "v_zero")
_DENSE_STORES = ("paged", "offload")  # one snapshot format: the same slots, read in the same order


def _buffers(prefix: str, lists: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {f"{prefix}{name}.{i}": t for name, ts in lists.items() for i, t in enumerate(ts)}


def _load_buffers(prefix: str, lists: dict[str, list[torch.Tensor]], tensors: dict) -> None:
    """Copy saved buffers into the leading slots (dim 1) of this cache's (equal or larger) buffers."""
    for name, ts in lists.items():
        for i, dst in enumerate(ts):
            key = f"{prefix}{name}.{i}"
            if key not in tensors:
                raise ConfigError(f"the world state has no KV buffer '{key}'; it was saved from another cache layout")
            src = tensors[key]
            if src.shape[0] != dst.shape[0] or src.shape[2:] != dst.shape[2:] or src.shape[1] > dst.shape[1]:
                raise ConfigError(f"saved KV buffer {tuple(src.shape)} does not fit this cache's {tuple(dst.shape)}")
            dst[:, : src.shape[1]].copy_(src)


# -- ring ---------------------------------------------------------------------------------------------
def _ring_snapshot(cache: RingKVCache, prefix: str = "") -> Snapshot:
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(kind="ring", window_origin=cache.window_origin, capacity_frames=cache.capacity_frames)
    return _buffers(prefix, {"k": cache.k, "v": cache.v}), meta


def _ring_restore(cache: RingKVCache, tensors: dict, meta: dict, prefix: str = "") -> None:
    if meta["capacity_frames"] > cache.capacity_frames:  # a global cache that had grown
        cache._grow(meta["capacity_frames"])
    _load_buffers(prefix, {"k": cache.k, "v": cache.v}, tensors)
    for c in _COUNTERS:
        setattr(cache, c, meta[c])
    cache.window_origin = meta["window_origin"]


def _shot_snapshot(cache: ShotSinkKVCache, prefix: str = "") -> Snapshot:
    """LongLive 2.0's shot-sink ring: the buffers plus its frame order, slots and pinned shot sink."""
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(
        kind="shot_sink", order=list(cache._order), slots=[[f, s] for f, s in cache._slot.items()],
        free=list(cache._free), pin_position=cache.pin_position, pin_frames=cache.pin_frames, num_pins=cache.num_pins,
    )  # fmt: skip
    return _buffers(prefix, {"k": cache.k, "v": cache.v}), meta


def _shot_restore(cache: ShotSinkKVCache, tensors: dict, meta: dict, prefix: str = "") -> None:
    _load_buffers(prefix, {"k": cache.k, "v": cache.v}, tensors)
    for c in _COUNTERS:
        setattr(cache, c, meta[c])
    cache._order = [int(f) for f in meta["order"]]
    cache._slot = {int(f): int(s) for f, s in meta["slots"]}
    cache._free = [int(s) for s in meta["free"]]
    cache.pin_position, cache.pin_frames, cache.num_pins = meta["pin_position"], meta["pin_frames"], meta["num_pins"]


# -- paged (resident, offloaded or quantized store) ----------------------------------------------------
def _offload_lists(cache: PagedKVCache) -> dict[str, list[torch.Tensor]]:
    """Per-layer K/V as the resident paged store would hold them: host pages + pending block buffers.

    The live cache is not changed: an offloaded layer's host pages are copied, then the frames its block
    buffer holds and has not written back yet go into their slots of the copy (the write-back the next
    block's first call would do).
    """
    store: OffloadStore = cache.store
    store._sync()  # every queued copy has landed (CPU lanes run their queues; CUDA synchronizes)
    ft = store.spec.frame_tokens
    ks, vs = list(store.k), list(store.v)
    for j, layer in enumerate(store.layout.offloaded):
        frames = store._pending[j]
        if not frames:
            continue
        slots = cache.frame_slots(list(frames))
        if (slots < 0).any():
            raise ConfigError(f"offloaded frames {list(frames)} have no page; save the world between blocks")
        for out, blk in ((ks, store.blk_k[j]), (vs, store.blk_v[j])):
            merged = out[layer].clone()
            for i, s in enumerate(slots.tolist()):
                merged[:, s * ft : (s + 1) * ft] = blk[:, i * ft : (i + 1) * ft].to(merged.device)
            out[layer] = merged
    return {"k": ks, "v": vs}


def _store_lists(cache: PagedKVCache, saving: bool) -> dict[str, list[torch.Tensor]]:
    store = cache.store
    if type(store) is OffloadStore:
        return _offload_lists(cache) if saving else {"k": store.k, "v": store.v}
    if type(store) is DenseStore:
        return {"k": store.k, "v": store.v}
    if type(store) is QuantStore:
        if saving:
            for layer in sorted(store._pending_layers):  # as commit() does for a begin() without a call
                store._quantize_pending(layer)
        lists = {name: getattr(store, name) for name in _QUANT_LISTS}
        lists.update(fp_k=store.fp_k, fp_v=store.fp_v)
        return lists
    raise ConfigError(f"saving a world state with the '{store.kind}' KV store is not supported")


def _paged_snapshot(cache: PagedKVCache, prefix: str = "") -> Snapshot:
    pool = cache.pool
    meta = {c: getattr(cache, c) for c in _COUNTERS}
    meta.update(
        kind="paged",
        store=cache.store.kind,
        page_frames=cache.page_frames,
        window_origin=cache.window_origin,
        num_pages=pool.num_pages,
        ref_counts=[p.ref_cnt for p in pool.pages],
        free=list(pool._free),
        pool_counters=[pool.num_allocations, pool.num_frees, pool.peak_used],
        table=[[lp, pid] for lp, pid in cache.table.pages.items()],  # insertion order kept
    )
    if type(cache.store) is QuantStore:
        meta["quant"] = {"end_frame": cache.store.end_frame, "quantized_frames": cache.store.quantized_frames}
    return _buffers(f"{prefix}store.", _store_lists(cache, saving=True)), meta


def _paged_restore(cache: PagedKVCache, tensors: dict, meta: dict, prefix: str = "") -> None:
    saved, here = meta.get("store", "paged"), cache.store.kind
    if saved != here and not (saved in _DENSE_STORES and here in _DENSE_STORES):
        raise ConfigError(f"the saved KV pages are '{saved}' but this run's cache stores them as '{here}'")
    if meta["num_pages"] > cache.pool.num_pages:
        cache._grow(meta["num_pages"])
    _load_buffers(f"{prefix}store.", _store_lists(cache, saving=False), tensors)
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
    if "quant" in meta:
        cache.store.end_frame = meta["quant"]["end_frame"]
        cache.store.quantized_frames = meta["quant"]["quantized_frames"]


# -- dispatch -----------------------------------------------------------------------------------------
def _kind(cache) -> str:
    if type(cache) is ShotSinkKVCache:
        return "shot_sink"
    return (
        "ring" if type(cache) is RingKVCache else "paged" if isinstance(cache, PagedKVCache) else type(cache).__name__
    )


def snapshot_cache(cache, prefix: str = "") -> Snapshot:
    """Tensors (on their device, names under `prefix`) and bookkeeping of `cache`; see the module docstring.

    Matrix-Game's ActionKVCache (a model-layer wrapper of three caches) is composed in world_state.py.
    """
    if type(cache) is RingKVCache:
        return _ring_snapshot(cache, prefix)
    if type(cache) is ShotSinkKVCache:
        return _shot_snapshot(cache, prefix)
    if isinstance(cache, PagedKVCache):
        return _paged_snapshot(cache, prefix)
    raise ConfigError(f"saving a world state with a {type(cache).__name__} KV cache is not supported")


def restore_cache(cache, tensors: dict[str, torch.Tensor], meta: dict[str, Any], prefix: str = "") -> None:
    """Write a snapshot into a fresh cache built from the same KVCacheConfig and KVCacheSpec."""
    kind = _kind(cache)
    if kind != meta.get("kind"):
        hint = ""
        if meta.get("kind") == "paged" and kind == "ring":
            hint = f"; set page_frames (the saved cache had pages of {meta.get('page_frames', '?')} frames)"
        raise ConfigError(f"the saved KV cache is '{meta.get('kind')}' but this run builds a '{kind}' cache{hint}")
    restore = {"ring": _ring_restore, "shot_sink": _shot_restore}.get(kind, _paged_restore)
    restore(cache, tensors, meta, prefix)


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
