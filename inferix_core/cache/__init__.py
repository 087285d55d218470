"""KV-cache layer: the transformer's self-attention reads and writes past frames only through here.

The pipeline sees `KVCacheConfig` (what the user asked for) and a `KVCache` (per-run state, the
Protocol in interface.py) whose `layer(i)` views (`LayerKV`) the attention layers call. All bookkeeping
is host-side Python integers; see docs/kv_cache.md.
"""

from .factory import build_cache
from .interface import KVCache, LayerKV
from .offload import OffloadedKVCache
from .paged import PagedKVCache
from .planner import MemoryPlan, plan_memory
from .pool import BlockPool
from .quant import QuantizedKVCache
from .ring import RingKVCache
from .shots import ShotSinkKVCache
from .spec import KVCacheConfig, KVCacheSpec
from .table import BlockTable

__all__ = [
    "BlockPool",
    "BlockTable",
    "KVCache",
    "KVCacheConfig",
    "KVCacheSpec",
    "LayerKV",
    "MemoryPlan",
    "OffloadedKVCache",
    "PagedKVCache",
    "QuantizedKVCache",
    "RingKVCache",
    "ShotSinkKVCache",
    "create_kv_cache",
    "plan_memory",
]


def create_kv_cache(config: KVCacheConfig, spec: KVCacheSpec, shot_sinks: bool = False) -> KVCache:
    """Build the cache implementation the config asks for (shot_sinks: one that can pin shots, shots.py)."""
    return build_cache(config, spec, shot_sinks)
