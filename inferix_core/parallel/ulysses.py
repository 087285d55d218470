"""Ulysses all-to-all: trade a split over tokens for a split over heads, and back.

Before attention each rank holds all heads of 1/N of the tokens; attention needs all tokens of a
head. One all-to-all per tensor turns (B, L/N, H, D) into (B, L, H/N, D) — every rank then runs the
ordinary attention backend on its H/N heads — and one more turns the output back. The traffic per
rank is (N−1)/N of its shard, independent of the number of ranks, which is why this beats gathering
the whole sequence (DeepSpeed-Ulysses; FastVideo's `DistributedAttention`).

Token order: `seq_to_head` concatenates the shards rank by rank (rank 0's tokens first); the caller
reorders if its shards are not contiguous (see `sp_transformer.SequenceParallel`, which interleaves
frames).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ..errors import ConfigError


def all_to_all(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """Exchange chunk j of dim 0 with rank j (x is (N, ...) and contiguous)."""
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out


def seq_to_head(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """(B, L/N, H, D) on every rank -> (B, L, H/N, D): all tokens (rank-major), this rank's heads."""
    n = dist.get_world_size(group)
    b, s, h, d = x.shape
    if h % n:
        raise ConfigError(f"{h} attention heads cannot be split over {n} ranks; use a world size dividing {h}")
    chunks = x.reshape(b, s, n, h // n, d).permute(2, 0, 1, 3, 4).contiguous()  # (N, B, L/N, H/N, D)
    out = all_to_all(chunks, group)  # chunk i: rank i's tokens, my heads
    return out.permute(1, 0, 2, 3, 4).reshape(b, n * s, h // n, d)


def head_to_seq(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """(B, L, H/N, D) -> (B, L/N, H, D): the inverse of `seq_to_head` (rank-major token order)."""
    n = dist.get_world_size(group)
    b, s, h, d = x.shape
    if s % n:
        raise ConfigError(f"{s} tokens cannot be split over {n} ranks")
    chunks = x.reshape(b, n, s // n, h, d).transpose(0, 1).contiguous()  # (N, B, L/N, H/N, D)
    out = all_to_all(chunks, group)  # chunk i: my tokens, rank i's heads
    return out.permute(1, 2, 0, 3, 4).reshape(b, s // n, n * h, d)


class SequenceParallelAttention:
    """Wraps an attention backend's `attend(q, k, v, mask)` with the Ulysses exchange.

    q arrives token-sharded (B, L/N, H, D). k and v arrive either token-sharded too (no KV cache: they
    are exchanged here) or already head-sharded (B, L_kv, H/N, D), because the KV-cache view exchanged
    them before storing them (the cache is sharded by heads, so each rank keeps 1/N of it and past
    frames never cross ranks again). The wrapped backend sees ordinary full-sequence tensors and
    never knows about ranks.
    """

    def __init__(self, attend: Callable[..., torch.Tensor], sp):
        self.inner = attend
        self.sp = sp

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        sp = self.sp
        heads = q.shape[2]
        q = sp.to_heads(q)
        if k.shape[2] == heads:  # still token-sharded (no cache); a cache hands back H/N heads
            k, v = sp.to_heads(k), sp.to_heads(v)
        return sp.to_tokens(self.inner(q, k, v, mask))
