"""Page arenas: many streams' KV pages in one pool and one store, shared copy-on-write.

Why: forks of one world share every page of their common past (a page's reference count in the
`BlockPool` says how many streams' tables map it), so N futures cost only their new blocks; and the
streams of one arena run as one batch per block step: one `index_copy_` and one `index_select` per
layer for all of them (`BatchedStreamKV`), each stream through its own page table.

    arena = PageArena(config, spec)            # spec.batch_size == 1: a stream is one batch row
    a = arena.new_stream()                     # a StreamKVCache: a PagedKVCache whose pages live in the arena
    ... a.begin(0, 3); layer(i).update(k, v) ...
    b = a.fork()                               # b maps a's pages (ref counts +1); nothing is copied
    b.begin(3, 3)                              # a write into a shared page copies that page first (COW)
    b.release()                                # b's references dropped; pages nobody maps are free again

A stream alone reads and writes exactly the values a `PagedKVCache` of the same settings would, in the
same order, so a stream in an arena continues bitwise like a plain paged run (tests/test_branching.py).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import ConfigError
from .interface import LayerKV
from .paged import CallPlan, PagedKVCache, planned_pages
from .pool import BlockPool
from .spec import KVCacheConfig, KVCacheSpec
from .table import BlockTable, DeviceIndex, token_slots

log = logging.getLogger(__name__)


class PageArena:
    """One page pool and one K/V store (per layer `(pages·P·T, H, D)`, batch row 1) for many streams.

    Page p holds the tokens `[p·P·T, (p+1)·P·T)` of every layer (P frames of T tokens), so copying a page
    is one contiguous slice copy per layer. The pool grows (logged) when the streams need more pages
    than planned; the buffers grow with it.
    """

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, num_pages: int | None = None):
        if spec.batch_size != 1:
            raise ConfigError(
                f"a page arena holds streams of batch 1 (got batch_size={spec.batch_size}); run each batch row "
                "as its own stream"
            )
        if config.offload != "off" or config.quantization != "none":
            raise ConfigError(
                "shared (forked or batched) streams need resident full-precision pages; "
                "use offload='off' and quantization='none'"
            )
        config.check_block(spec.block_frames)
        self.config, self.spec = config, spec
        self.page_frames = config.page_frames or spec.block_frames
        self.page_tokens = self.page_frames * spec.frame_tokens
        pages = num_pages or planned_pages(config, spec)
        self.pool = BlockPool(pages)
        self.k = [self._alloc(pages) for _ in range(spec.num_layers)]
        self.v = [self._alloc(pages) for _ in range(spec.num_layers)]
        self.num_page_copies = 0  # copy-on-write copies made so far
        self.num_streams = 0  # streams created (for names in logs)

    def _alloc(self, pages: int) -> torch.Tensor:
        s = self.spec
        return torch.empty(pages * self.page_tokens, s.num_heads, s.head_dim, dtype=s.dtype, device=s.device)

    @property
    def num_pages(self) -> int:
        return self.pool.num_pages

    def grow(self, num_pages: int) -> None:
        """Grow the pool and the buffers to `num_pages` pages (never shrinks)."""
        extra = num_pages - self.pool.num_pages
        if extra <= 0:
            return
        self.pool.grow(extra)
        self.k = [torch.cat([b, self._alloc(extra)]) for b in self.k]
        self.v = [torch.cat([b, self._alloc(extra)]) for b in self.v]

    def allocate(self, count: int) -> list[int]:
        """`count` free pages, growing the arena when too few are free."""
        ids = self.pool.allocate(count)
        if ids is None:
            need = self.pool.num_pages + count - self.pool.num_free_pages
            log.info(
                "KV page arena grows from %d to %d pages (%d streams)", self.pool.num_pages, need, self.num_streams
            )
            self.grow(need)
            ids = self.pool.allocate(count)
        return ids

    def copy_page(self, src: int, dst: int) -> None:
        """Copy page `src` into page `dst` in every layer (the copy of copy-on-write)."""
        a, b, n = src * self.page_tokens, dst * self.page_tokens, self.page_tokens
        for buf in self.k + self.v:
            buf[b : b + n].copy_(buf[a : a + n])
        self.num_page_copies += 1

    def new_stream(self) -> StreamKVCache:
        """An empty stream whose pages come from this arena."""
        return StreamKVCache(self)

    def adopt(self, cache) -> StreamKVCache:
        """A stream in this arena holding what `cache` (a ring or paged cache of batch 1 and the same
        settings, e.g. one a world state was loaded into) holds: its live frames' K/V, copied once, and its
        window bookkeeping. The stream then continues as `cache` would (bitwise for a paged source: the
        same values are attended in the same order)."""
        for attr in ("window_frames", "sink_frames"):
            if getattr(cache.config, attr) != getattr(self.config, attr):
                raise ConfigError(
                    f"the cache to adopt has {attr}={getattr(cache.config, attr)}, this arena "
                    f"{getattr(self.config, attr)}; build the arena with the same cache settings"
                )
        if cache.spec.batch_size != 1 or cache.spec.frame_tokens != self.spec.frame_tokens:
            raise ConfigError("the cache to adopt must be one batch-1 stream at this arena's latent size")
        stream = StreamKVCache(self)
        frames = cache.resident_frames()
        pages = sorted({f // self.page_frames for f in frames})
        for lp, pid in zip(pages, self.allocate(len(pages)), strict=True):
            stream.table.add(lp, pid)
        idx = torch.from_numpy(token_slots(stream.table.frame_slots(frames), self.spec.frame_tokens))
        idx = idx.to(self.k[0].device)
        for layer in range(self.spec.num_layers):
            k, v = cache.logical_kv(layer)  # (1, L, H, D) in resident order
            self.k[layer].index_copy_(0, idx, k[0].to(self.spec.dtype))
            self.v[layer].index_copy_(0, idx, v[0].to(self.spec.dtype))
        stream.end_frame, stream.window_origin = cache.end_frame, cache.window_origin
        stream.num_evictions, stream.num_eviction_events, stream.num_calls = (
            cache.num_evictions, cache.num_eviction_events, cache.num_calls
        )  # fmt: skip
        return stream

    def page_bytes(self) -> int:
        """K and V bytes of one page over all layers."""
        return self.spec.num_layers * self.spec.page_size_bytes(page_frames=self.page_frames)

    def resident_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def stats(self) -> dict:
        return {
            "num_pages": self.pool.num_pages,
            "used_pages": self.pool.num_used_pages,
            "shared_pages": sum(p.ref_cnt > 1 for p in self.pool.pages),
            "peak_used_pages": self.pool.peak_used,
            "page_copies": self.num_page_copies,
            "page_bytes": self.page_bytes(),
            "used_bytes": self.pool.num_used_pages * self.page_bytes(),
            "resident_bytes": self.resident_bytes(),
        }


class _ArenaStore:
    """The store of one StreamKVCache: reads and writes its own slots of the arena's buffers.

    The same `index_copy_` / `index_select` a `DenseStore` does, on the arena's flat buffers; the device
    indices are built on first use after each `begin()` (a batched call builds one index for all streams
    instead, so a stream's own is never made then).
    """

    kind = "arena"

    def __init__(self, arena: PageArena):
        self.arena = arena
        self.write_index = DeviceIndex(arena.spec.device)
        self.read_index = DeviceIndex(arena.spec.device)
        self._plan: CallPlan | None = None
        self._indices: tuple[torch.Tensor, torch.Tensor] | None = None

    def commit(self, plan: CallPlan) -> None:
        self._plan, self._indices = plan, None

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._indices is None:  # once per call, on its first layer
            ft = self.arena.spec.frame_tokens
            self._indices = (
                self.write_index.load(token_slots(self._plan.write_frame_slots, ft)),
                self.read_index.load(token_slots(self._plan.live_frame_slots, ft)),
            )
        w, r = self._indices
        kb, vb = self.arena.k[layer], self.arena.v[layer]
        kb.index_copy_(0, w, k[0].to(kb.dtype))
        vb.index_copy_(0, w, v[0].to(vb.dtype))
        return kb.index_select(0, r).unsqueeze(0), vb.index_select(0, r).unsqueeze(0)  # (1, L, H, D)

    def read_frames(self, layer: int, frames: list[int], frame_slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(token_slots(frame_slots, self.arena.spec.frame_tokens)).to(self.arena.k[layer].device)
        return self.arena.k[layer].index_select(0, idx)[None], self.arena.v[layer].index_select(0, idx)[None]

    def grow(self, num_frame_slots: int) -> None:
        self.arena.grow(-(-num_frame_slots // self.arena.page_frames))

    def prefetch(self, layer: int) -> None:
        """Resident: nothing to bring in."""

    def reset(self) -> None:
        """Nothing to clear: slots are overwritten before they are read."""

    def stats(self) -> dict:
        return {"resident_bytes": self.arena.resident_bytes(), "offloaded_bytes": 0}


class StreamKVCache(PagedKVCache):
    """One stream's page table over a `PageArena`: a `PagedKVCache` whose pool and store are shared.

    Differences from a PagedKVCache: `begin()` first copies every page the call will write into that
    another stream also maps (copy-on-write, counted in `arena.num_page_copies`); `fork()` returns a
    second table over the same pages; `reset()` and `release()` drop only this stream's references.
    """

    kind = "arena"

    def __init__(self, arena: PageArena):
        config, spec = arena.config, arena.spec
        self.arena = arena
        self.config, self.spec = config, spec
        self.page_frames = arena.page_frames
        self.sink_frames = 0 if config.is_global else config.sink_frames
        self.ring_frames = config.ring_frames
        self.pool: BlockPool = arena.pool
        self.table = BlockTable(self.page_frames, spec.frame_tokens)
        self.store = _ArenaStore(arena)
        self._views = [LayerKV(self, i) for i in range(spec.num_layers)]
        self.plan = None
        self.released = False
        arena.num_streams += 1
        self.reset()

    def _check_live(self) -> None:
        if self.released:
            raise ConfigError("this stream's KV pages were released (a dropped fork or stopped stream); it cannot run")

    def copy_on_write(self, start_frame: int, num_frames: int) -> int:
        """Give this stream its own copy of every mapped page that frames [start, start + n) write into
        and another stream also maps; returns the number of pages copied."""
        touched = {f // self.page_frames for f in range(start_frame, start_frame + num_frames)}
        copied = 0
        for lp in sorted(touched):
            old = self.table.pages.get(lp)
            if old is None or self.pool.pages[old].ref_cnt == 1:
                continue
            (new,) = self.arena.allocate(1)
            self.arena.copy_page(old, new)
            self.pool.free([old])
            self.table.pages[lp] = new  # same key: the table keeps its order
            copied += 1
        return copied

    def begin(self, start_frame: int, num_frames: int) -> None:
        self._check_live()
        self.copy_on_write(start_frame, num_frames)
        super().begin(start_frame, num_frames)

    def _grow(self, num_pages: int) -> None:
        log.info("KV page arena grows to %d pages", num_pages)
        self.arena.grow(num_pages)

    def fork(self) -> StreamKVCache:
        """A second stream at this one's position mapping the same pages (each page's ref count + 1)."""
        self._check_live()
        other = StreamKVCache(self.arena)
        self.pool.incref(list(self.table.pages.values()))
        other.table.pages = dict(self.table.pages)
        other.end_frame, other.window_origin = self.end_frame, self.window_origin
        other.num_evictions, other.num_eviction_events, other.num_calls = (
            self.num_evictions, self.num_eviction_events, self.num_calls
        )  # fmt: skip
        return other

    def own_pages(self) -> list[int]:
        """Pages only this stream maps (ref count 1): what dropping it frees."""
        return [p for p in self.table.pages.values() if self.pool.pages[p].ref_cnt == 1]

    def release(self) -> None:
        """Drop this stream's references (its own pages go back to the pool); the stream cannot run after."""
        if self.released:
            return
        self.pool.free(list(self.table.pages.values()))
        self.table.clear()
        self.released = True

    def reset(self) -> None:
        """Forget every frame: drop this stream's references, never another stream's (the pool is shared)."""
        if self.table.pages:
            self.pool.free(list(self.table.pages.values()))
        self.table.clear()
        self.end_frame = 0
        self.reset_window()
        self.plan = None
        self.num_evictions = 0
        self.num_eviction_events = 0
        self.num_calls = 0

    def stats(self) -> dict:
        out = super().stats()
        out.update(own_pages=len(self.own_pages()), mapped_pages=len(self.table), arena=self.arena.stats())
        return out


class BatchedStreamKV:
    """The KV cache of one batched transformer call over several streams of one arena (batch row i = stream i).

    `begin_each(starts, n)` plans every stream (copy-on-write included) and builds one write index (all
    streams' new tokens) and one read index (each stream's span, padded to the longest); `layer(i).update`
    then writes and reads all streams with one `index_copy_` and one `index_select` per layer. Spans of
    unequal length (streams at different positions while a window fills, or global attention) are
    padded, and `key_mask` (B, 1, 1, L) hides the padding from attention; equal spans need no mask.
    Copy-on-write makes every written slot belong to one stream only, so the batched write cannot touch
    another stream's frames.
    """

    def __init__(self, streams: list[StreamKVCache]):
        if not streams:
            raise ConfigError("a batched call needs at least one stream")
        arena = streams[0].arena
        if any(s.arena is not arena for s in streams):
            raise ConfigError("streams batched together must share one page arena")
        self.arena, self.streams = arena, streams
        self.config, self.spec = arena.config, arena.spec
        self._views = [LayerKV(self, i) for i in range(self.spec.num_layers)]
        self._w = DeviceIndex(self.spec.device)
        self._r = DeviceIndex(self.spec.device)
        self.key_mask: torch.Tensor | None = None
        self.span = 0

    def begin_each(self, starts: list[int], num_frames: int) -> None:
        if len(starts) != len(self.streams):
            raise ConfigError(f"{len(starts)} start frames for {len(self.streams)} streams")
        ft = self.spec.frame_tokens
        for stream, start in zip(self.streams, starts, strict=True):
            stream.begin(start, num_frames)
        writes = [token_slots(s.plan.write_frame_slots, ft) for s in self.streams]
        reads = [token_slots(s.plan.live_frame_slots, ft) for s in self.streams]
        span = max(r.size for r in reads)
        padded = np.stack([np.pad(r, (0, span - r.size), constant_values=r[0]) for r in reads])
        self._write = self._w.load(np.concatenate(writes))
        self._read = self._r.load(padded.reshape(-1))
        self.span = span
        if all(r.size == span for r in reads):
            self.key_mask = None
        else:
            lengths = torch.tensor([r.size for r in reads])
            mask = torch.arange(span)[None, :] < lengths[:, None]  # (B, L)
            self.key_mask = mask[:, None, None, :].to(self.spec.device)

    def layer(self, index: int) -> LayerKV:
        return self._views[index]

    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (B, n, H, D) of B streams → each stream's span (B, L, H, D), padded to the longest."""
        b, _, h, d = k.shape
        kb, vb = self.arena.k[layer], self.arena.v[layer]
        kb.index_copy_(0, self._write, k.reshape(-1, h, d).to(kb.dtype))
        vb.index_copy_(0, self._write, v.reshape(-1, h, d).to(vb.dtype))
        return kb.index_select(0, self._read).view(b, self.span, h, d), vb.index_select(0, self._read).view(
            b, self.span, h, d
        )
