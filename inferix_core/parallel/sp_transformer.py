"""Sequence parallelism for the causal transformer: the tokens of a block split across ranks.

`enable_sequence_parallel(model)` attaches a `SequenceParallel` to `model.sequence_parallel`; the
transformer's forward calls it at two points and is otherwise unchanged:

* `shard` after patchify: each rank keeps 1/N of every frame's tokens (frame f's tokens
  [r·T/N, (r+1)·T/N), each frame padded to a multiple of N). Splitting *inside* every frame, not
  by whole frames, keeps the layout (B, F, tokens, C) per rank, so the per-frame modulation, the head
  and everything per-token (norms, RoPE with the same slice of the rotation table, cross-attention,
  FFN) run on the shard unchanged — and it works for any block length, e.g. 3 frames on 2 ranks.
* `gather` after the head: all-gather the (small, out_dim·patch) head outputs so every rank
  unpatchifies the full chunk and the sampler stays identical on all ranks (no broadcast needed).

Self-attention is the only place tokens meet. Its K/V go through a head-sharded view of the KV cache:
`update(k, v)` first exchanges them (`ulysses.seq_to_head`) to all tokens × H/N heads and stores
that, so each rank's cache is an ordinary cache built with `num_heads = H/N` (ring, paged, offloaded
or quantized — windows, sinks and eviction are per frame and identical on every rank). The attention
call is wrapped by `ulysses.SequenceParallelAttention`, which exchanges q, runs the active backend on
H/N heads, and exchanges the output back. Padding tokens are dropped before the cache and attention
and come back as zeros, so they never influence a real token.
"""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..errors import ConfigError
from .distributed import init_distributed, is_distributed, launched_world_size, local_device
from .ulysses import SequenceParallelAttention, all_to_all

log = logging.getLogger(__name__)

DISABLE_ENV = "INFERIX_SEQUENCE_PARALLEL"  # "0": never split the model even under torchrun


class SequenceParallel:
    """Token split / Ulysses exchange state of one model on one rank (see the module docstring)."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._layout: tuple[int, int, int] | None = None  # (frames, tokens per frame, local tokens per frame)

    # -- layout of the current forward --------------------------------------------------------------
    def local_frame_tokens(self, frame_tokens: int) -> int:
        """Tokens of one frame on each rank (frame_tokens rounded up to a multiple of the world size)."""
        return -(-frame_tokens // self.world_size)

    def shard(self, model, x: torch.Tensor, freqs: torch.Tensor, grid, kv_cache=None):
        """Keep this rank's tokens of every frame: x (B, F·T, C) -> (B, F·T/N, C); freqs likewise.

        Returns (x, freqs, kv_cache) where kv_cache is wrapped so layer views exchange K/V to heads.
        """
        self.attach(model)
        f, ft = int(grid[0]), int(grid[1]) * int(grid[2])
        ftl = self.local_frame_tokens(ft)
        pad = ftl * self.world_size - ft
        self._layout = (f, ft, ftl)
        b, _, c = x.shape
        xs = x.view(b, f, ft, c)
        if pad:
            xs = F.pad(xs, (0, 0, 0, pad))
        xs = xs.view(b, f, self.world_size, ftl, c)[:, :, self.rank].reshape(b, f * ftl, c)
        fr = freqs.view(f, ft, *freqs.shape[1:])
        if pad:  # any rotation will do for the padding tokens: their values are dropped in to_heads
            fr = torch.cat([fr, fr[:, :1].expand(f, pad, *freqs.shape[1:])], dim=1)
        fr = fr.view(f, self.world_size, ftl, *freqs.shape[1:])[:, self.rank].reshape(f * ftl, *freqs.shape[1:])
        return xs, fr, (None if kv_cache is None else HeadShardedCache(kv_cache, self))

    def gather(self, out: torch.Tensor, grid) -> torch.Tensor:
        """(B, F, T/N, P) head outputs on each rank -> (B, F, T, P) on every rank."""
        f, ft, ftl = self._layout
        parts = [torch.empty_like(out) for _ in range(self.world_size)]
        dist.all_gather(parts, out.contiguous(), group=self.group)
        full = torch.stack(parts, dim=2).reshape(out.shape[0], f, self.world_size * ftl, out.shape[-1])
        return full[:, :, :ft]

    # -- the Ulysses exchange in this layout ---------------------------------------------------------
    def to_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, F·T/N, H, D) token shard -> (B, F·T, H/N, D), frame-major as the cache and masks expect."""
        f, ft, ftl = self._layout
        n = self.world_size
        b, _, h, d = t.shape
        chunks = t.reshape(b, f * ftl, n, h // n, d).permute(2, 0, 1, 3, 4).contiguous()  # (N, B, F·T/N, H/N, D)
        out = all_to_all(chunks, self.group).view(n, b, f, ftl, h // n, d)  # chunk i: rank i's tokens
        out = out.permute(1, 2, 0, 3, 4, 5).reshape(b, f, n * ftl, h // n, d)
        if n * ftl != ft:
            out = out[:, :, :ft]
        return out.reshape(b, f * ft, h // n, d)

    def to_tokens(self, t: torch.Tensor) -> torch.Tensor:
        """(B, F·T, H/N, D) attention output -> (B, F·T/N, H, D): the inverse of `to_heads`."""
        f, ft, ftl = self._layout
        n = self.world_size
        b, _, hn, d = t.shape
        t = t.reshape(b, f, ft, hn, d)
        if n * ftl != ft:
            t = F.pad(t, (0, 0, 0, 0, 0, n * ftl - ft))
        chunks = t.view(b, f, n, ftl, hn, d).permute(2, 0, 1, 3, 4, 5).contiguous()  # (N, B, F, T/N, H/N, D)
        out = all_to_all(chunks, self.group)  # chunk i: my tokens, rank i's heads
        return out.permute(1, 2, 3, 0, 4, 5).reshape(b, f * ftl, n * hn, d)

    # -- model wiring --------------------------------------------------------------------------------
    def attach(self, model) -> None:
        """Wrap every self-attention's backend (again, if `set_attention_backend` replaced it)."""
        for block in model.blocks:
            attn = block.self_attn
            current = attn.attend
            if isinstance(current, SequenceParallelAttention):
                if current.sp is self:
                    continue
                current = current.inner
            attn.attend = SequenceParallelAttention(current, self)

    def detach(self, model) -> None:
        for block in model.blocks:
            if isinstance(block.self_attn.attend, SequenceParallelAttention):
                block.self_attn.attend = block.self_attn.attend.inner


class HeadShardedCache:
    """A KV cache seen through the exchange: the transformer's `layer(i)` views store all tokens × H/N heads."""

    __slots__ = ("cache", "sp")

    def __init__(self, cache, sp: SequenceParallel):
        self.cache, self.sp = cache, sp

    def layer(self, index: int) -> HeadShardedLayer:
        return HeadShardedLayer(self.cache.layer(index), self.sp)

    def __getattr__(self, name: str):
        return getattr(self.cache, name)


class HeadShardedLayer:
    __slots__ = ("sp", "view")

    def __init__(self, view, sp: SequenceParallel):
        self.view, self.sp = view, sp

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exchange this chunk's K/V (B, F·T/N, H, D) to (B, F·T, H/N, D), store, return the cached span."""
        return self.view.update(self.sp.to_heads(k), self.sp.to_heads(v))


# -- enabling ----------------------------------------------------------------------------------------
def enable_sequence_parallel(model, group: dist.ProcessGroup | None = None) -> SequenceParallel | None:
    """Split `model`'s tokens over the ranks of `group` (default: all ranks); None on one rank.

    Raises ConfigError when the heads do not divide by the world size (each rank owns H/N heads).
    """
    if not is_distributed():
        return None
    world = dist.get_world_size(group)
    if world == 1:
        return None
    if not hasattr(model, "blocks") or not hasattr(model, "sequence_parallel"):
        raise ConfigError(f"{type(model).__name__} has no sequence-parallel hook; only CausalWanTransformer does")
    heads = model.config.num_heads
    if heads % world:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        raise ConfigError(
            f"sequence parallelism splits the {heads} attention heads over the ranks, and {heads} does not divide "
            f"by world size {world}; launch with --nproc-per-node (× nodes) in {divisors}"
        )
    current = getattr(model, "sequence_parallel", None)
    if current is not None and current.group is group:
        return current
    sp = SequenceParallel(group)
    model.sequence_parallel = sp
    sp.attach(model)
    log.info("sequence parallel: rank %d of %d, %d of %d heads per rank", sp.rank, world, heads // world, heads)
    return sp


def disable_sequence_parallel(model) -> None:
    """Back to one process's computation (used by the benchmark's 1-GPU baseline)."""
    sp = getattr(model, "sequence_parallel", None)
    if sp is not None:
        sp.detach(model)
        model.sequence_parallel = None


def head_shards(model) -> int:
    """How many ranks share the model's heads (the divisor of the KV cache's num_heads)."""
    sp = getattr(model, "sequence_parallel", None)
    return sp.world_size if sp is not None else 1


def maybe_enable_sequence_parallel(model) -> SequenceParallel | None:
    """Enable sequence parallelism when this process was launched as one of several ranks (torchrun).

    Why here and not in the CLI: every entry point (CLI, workflows, nodes, Python) builds a pipeline, so
    `torchrun --nproc-per-node N ...` needs no flag. Set INFERIX_SEQUENCE_PARALLEL=0 to opt out. A model
    loaded onto another GPU than this rank's (`cuda` before the device was set) is moved to `cuda:LOCAL_RANK`.
    """
    if os.environ.get(DISABLE_ENV, "1") == "0" or not hasattr(model, "sequence_parallel"):
        return None
    if model.sequence_parallel is not None:
        return model.sequence_parallel
    if launched_world_size() <= 1 and not is_distributed():
        return None
    param = next(model.parameters())
    init_distributed(param.device)
    if param.device.type == "cuda":
        mine = local_device("cuda")
        if param.device != mine:
            log.warning("rank model was on %s; moving it to this rank's %s", param.device, mine)
            model.to(mine)
    return enable_sequence_parallel(model)
