"""KV-cache layer: the transformer's self-attention reads and writes past frames only through here.

The pipeline sees `KVCacheConfig` (what the user asked for) and a `KVCache` (per-run state) whose
`layer(i)` views the attention layers call. All bookkeeping is host-side Python integers. Every cache
has begin(start_frame, num_frames), layer(i).update(k, v), reset(), stats(), logical_kv(layer),
end_frame, attended_tokens, num_calls and num_eviction_events; see docs/kv_cache.md.
"""

from .offload import OffloadedKVCache
from .paged import PagedKVCache
from .planner import MemoryPlan, plan_memory
from .pool import BlockPool
from .quant import QuantizedKVCache
from .ring import RingKVCache
from .spec import KVCacheConfig, KVCacheSpec
from .table import BlockTable

__all__ = [
    "BlockPool",
    "BlockTable",
    "KVCacheConfig",
    "KVCacheSpec",
    "MemoryPlan",
    "OffloadedKVCache",
    "PagedKVCache",
    "QuantizedKVCache",
    "RingKVCache",
    "create_kv_cache",
    "plan_memory",
]


def create_kv_cache(config: KVCacheConfig, spec: KVCacheSpec):
    """Build the cache implementation the config asks for."""
    from .factory import build_cache

    return build_cache(config, spec)
