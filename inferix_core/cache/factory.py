"""Pick the cache implementation a KVCacheConfig asks for."""

from __future__ import annotations

from ..errors import BackendUnavailableError
from .ring import RingKVCache
from .spec import KVCacheConfig, KVCacheSpec


def build_cache(config: KVCacheConfig, spec: KVCacheSpec):
    if config.offload == "off" and config.quantization == "none" and config.page_frames == 0:
        return RingKVCache(config, spec)
    raise BackendUnavailableError(
        f"KV cache with offload={config.offload!r}, quantization={config.quantization!r}, "
        f"page_frames={config.page_frames} is not available in this build; use the defaults"
    )
