"""What a cache's `state_dict()` is made of: named buffers plus JSON-able bookkeeping (see cache/snapshot.py).

Each cache kind, store and pool writes and reads its own state with these helpers; nothing outside a class
touches its private attributes.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError

Snapshot = tuple[dict[str, torch.Tensor], dict[str, Any]]  # tensors, JSON-able bookkeeping

COUNTERS = ("end_frame", "num_evictions", "num_eviction_events", "num_calls")


def named_buffers(prefix: str, lists: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {f"{prefix}{name}.{i}": t for name, ts in lists.items() for i, t in enumerate(ts)}


def load_named_buffers(prefix: str, lists: dict[str, list[torch.Tensor]], tensors: dict) -> None:
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


def counters_of(cache: object) -> dict[str, int]:
    return {c: getattr(cache, c) for c in COUNTERS}


def set_counters(cache: object, meta: dict[str, Any]) -> None:
    for c in COUNTERS:
        setattr(cache, c, meta[c])
