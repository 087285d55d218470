"""Pick the cache implementation a KVCacheConfig asks for: one table, read top to bottom.

As vLLM's `spec_manager_map`: the kind is decided from the config alone (`cache_kind`), and the table maps
the kind to a constructor. The defaults (no paging, offload or quantization) keep the RingKVCache path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import BackendUnavailableError
from .interface import KVCache
from .offload import OffloadedKVCache
from .offload_layout import offload_layout
from .paged import PagedKVCache
from .quant import QuantizedKVCache
from .ring import RingKVCache
from .shots import ShotSinkKVCache
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)

CACHE_KINDS: dict[str, Callable[[KVCacheConfig, KVCacheSpec], KVCache]] = {
    "ring": RingKVCache,  # resident ring, slices with host ints (default)
    "paged": PagedKVCache,  # resident pages + page table (page_frames > 0)
    "offload": OffloadedKVCache,  # pages in pinned CPU memory, prefetched layer by layer
    "quant": QuantizedKVCache,  # int8 / int4 pages with a full-precision residual window
    "shot_sink": ShotSinkKVCache,  # the ring's storage with LongLive 2.0's pinned shot sinks (shots.py)
}


def cache_kind(config: KVCacheConfig, spec: KVCacheSpec | None = None, shot_sinks: bool = False) -> str:
    """Which entry of CACHE_KINDS serves `config` (offload="auto" needs the spec to compare with the budget).

    shot_sinks (a sampling setting, `SamplingConfig.shot_sinks`) needs pins in a sliding window: the
    resident ring's storage; a global cache evicts nothing, so there is nothing to pin and it stays a ring.
    """
    if shot_sinks and not config.is_global:
        kind = cache_kind(config, spec)
        if kind != "ring":
            raise BackendUnavailableError(
                f"shot sinks (LongLive 2.0 multi-shot) need the resident ring cache, not '{kind}'; "
                "set page_frames=0, offload='off' and quantization='none'"
            )
        return "shot_sink"
    if config.quantization != "none":
        if config.offload == "always":
            raise BackendUnavailableError(
                "quantized pages cannot be offloaded yet; use offload='off' with quantization, "
                "or quantization='none' with offload"
            )
        return "quant"
    if config.offload == "always":
        return "offload"
    if config.offload == "auto" and config.gpu_budget_bytes is not None and spec is not None:
        if offload_layout(config, spec).num_offloaded > 0:
            return "offload"
        log.info("offload='auto': the whole KV cache fits gpu_budget_bytes; keeping it resident")
    return "paged" if config.page_frames > 0 else "ring"


def build_cache(config: KVCacheConfig, spec: KVCacheSpec, shot_sinks: bool = False) -> KVCache:
    """Construct the implementation `cache_kind` picks."""
    return CACHE_KINDS[cache_kind(config, spec, shot_sinks)](config, spec)
