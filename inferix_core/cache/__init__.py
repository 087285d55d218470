"""KV-cache layer: the transformer's self-attention reads and writes past frames only through here.

The pipeline sees `KVCacheConfig` (what the user asked for) and a `KVCache` (per-run state) whose
`layer(i)` views the attention layers call. All bookkeeping is host-side Python integers.
"""

from .ring import RingKVCache
from .spec import KVCacheConfig, KVCacheSpec

__all__ = ["KVCacheConfig", "KVCacheSpec", "RingKVCache", "create_kv_cache"]


def create_kv_cache(config: KVCacheConfig, spec: KVCacheSpec):
    """Build the cache implementation the config asks for."""
    from .factory import build_cache

    return build_cache(config, spec)
