"""PagedKVCache: K/V in fixed-size pages of whole latent frames, with a page table and a page pool.

The cache does the bookkeeping (which frames are live, which pages hold them, what a call writes and
reads) on the host; a *store* holds the tensors and does the reads and writes. The resident store is
here (`DenseStore`); `offload.py` and `quant.py` provide stores that keep cold pages in pinned CPU
memory or as int8/int4 codes. Semantics are the reference's sliding window with sink frames
(tests/fixtures/README.md §1.4) without its shifting copy: an evicted page is returned to the pool and
its slots are simply overwritten later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from .interface import LayerKV
from .pool import BlockPool
from .spec import KVCacheConfig, KVCacheSpec
from .state import Snapshot, counters_of, load_named_buffers, named_buffers, set_counters
from .table import BlockTable, DeviceIndex, copy_token_rows, token_slots
from .window import SlidingWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallPlan:
    """What one transformer call does to the cache, decided on the host in `begin()`.

    Frame slots index the store (page id · page_frames + offset, see table.py). `live_*` lists the
    attention span in chronological order (sink frames first), the reference's buffer order.
    """

    start_frame: int
    num_frames: int
    prev_end_frame: int  # end_frame before this call
    end_frame: int
    new_block: bool  # this call writes frames never written before (first denoising step of a block)
    write_frame_slots: np.ndarray  # (num_frames,)
    live_frames: tuple[int, ...]
    live_frame_slots: np.ndarray  # (len(live_frames),)


class DenseStore:
    """Resident storage: per layer K and V of shape (B, num_frame_slots·T, H, D) on the run's device.

    Writes are `index_copy_` with a device slot index and reads `index_select` with a device span index,
    both committed once per block, so a block step has no host-dependent slicing and can be captured in
    a CUDA graph once the window is full (the span length is then constant).
    """

    kind = "paged"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, num_frame_slots: int):
        self.config, self.spec = config, spec
        self.num_frame_slots = num_frame_slots
        self.k = [self._alloc(num_frame_slots) for _ in range(spec.num_layers)]
        self.v = [self._alloc(num_frame_slots) for _ in range(spec.num_layers)]
        self.write_index = DeviceIndex(spec.device)
        self.read_index = DeviceIndex(spec.device)

    def _alloc(self, frame_slots: int, device: torch.device | str | None = None, pin: bool = False) -> torch.Tensor:
        s = self.spec
        shape = (s.batch_size, frame_slots * s.frame_tokens, s.num_heads, s.head_dim)
        return torch.empty(shape, dtype=s.dtype, device=device or s.device, pin_memory=pin)

    def commit(self, plan: CallPlan) -> None:
        """Copy this call's write and read indices to the device (no-op when unchanged)."""
        ft = self.spec.frame_tokens
        self._w = self.write_index.load(token_slots(plan.write_frame_slots, ft))
        self._r = self.read_index.load(token_slots(plan.live_frame_slots, ft))

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kb, vb = self.k[layer], self.v[layer]
        copy_token_rows(kb, self._w, k)
        copy_token_rows(vb, self._w, v)
        return kb.index_select(1, self._r), vb.index_select(1, self._r)  # (B, L, H, D)

    def read_frames(self, layer: int, frames: list[int], frame_slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of `frames` (stored at `frame_slots`), in that order; for inspection, not the loop."""
        idx = torch.from_numpy(token_slots(frame_slots, self.spec.frame_tokens)).to(self.k[layer].device)
        return self.k[layer].index_select(1, idx), self.v[layer].index_select(1, idx)

    def state_lists(self, frame_slots, saving: bool) -> dict[str, list[torch.Tensor]]:
        """The buffers a world file holds, by name (frame_slots: the cache's frame -> slot map, for stores that
        still hold frames outside their buffers)."""
        return {"k": self.k, "v": self.v}

    def state_meta(self) -> dict:
        return {}

    def load_state_meta(self, meta: dict) -> None:
        return None

    def grow(self, num_frame_slots: int) -> None:
        extra = num_frame_slots - self.num_frame_slots
        self.k = [torch.cat([b, self._alloc(extra)], dim=1) for b in self.k]
        self.v = [torch.cat([b, self._alloc(extra)], dim=1) for b in self.v]
        self.num_frame_slots = num_frame_slots

    def prefetch(self, layer: int) -> None:
        """Resident: nothing to bring in."""

    def reset(self) -> None:
        """Nothing to clear: slots are overwritten before they are read."""

    def resident_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def stats(self) -> dict:
        return {"resident_bytes": self.resident_bytes(), "offloaded_bytes": 0}


class PagedKVCache(SlidingWindow):
    """Window + sink frames in pages; see the module docstring. Interface: KVCache (interface.py).

    Live frames after writing up to end_frame (S sink frames, R = window − S ring frames)::

        frames:  0 .. S−1  |  (evicted)  |  end−R .. end−1
                 sink      |             |  the R most recent frames
        pages:   [f0 f1 f2] [f3 f4 f5] [f6 f7 f8] ...   (P = 3; a page is freed when none of its frames
                                                        is live; a straddling page stays until then)

    With window = −1 every frame stays live (pages sized from spec.max_frames, grown if exceeded).

    restart(W), as RingKVCache's: pages need no re-basing (frames map to pages through the table); the
    live set just starts at W, and the pages of frames before W are freed by the next begin()::

        reset(); begin(0, S) ...; restart(W); begin(W, n) ...
        live:  [0, S)  ∪  [max(S, W, end − R), end)      (frames S..W−1 were never written again)
    """

    kind = "paged"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, store_cls: type = DenseStore):
        config.check_block(spec.block_frames)
        self.config, self.spec = config, spec
        self.page_frames = config.page_frames or spec.block_frames
        self.sink_frames = 0 if config.is_global else config.sink_frames
        self.ring_frames = config.ring_frames
        num_pages = planned_pages(config, spec)
        self.pool = BlockPool(num_pages)
        self.table = BlockTable(self.page_frames, spec.frame_tokens)
        self.store = store_cls(config, spec, num_pages * self.page_frames)
        self._views = [LayerKV(self, i) for i in range(spec.num_layers)]
        self.plan: CallPlan | None = None
        self.reset()

    # -- bookkeeping (host only) -------------------------------------------------------------------
    def _ring_start(self, end: int) -> int:
        """First non-sink live frame when frames [0, end) have been written (never before a restart point)."""
        if self.ring_frames is None:
            return self.sink_frames
        return max(self.sink_frames, self.window_origin, end - self.ring_frames)

    def resident_frames(self) -> list[int]:
        """Absolute frame indices currently live, sink first then oldest to newest."""
        end = self.end_frame
        return list(range(min(self.sink_frames, end))) + list(range(self._ring_start(end), end))

    def paged_ranges(self, end: int) -> list[tuple[int, int]]:
        """Frame ranges [a, b) that must have a page when frames [0, end) are written: every live frame.
        (The quantized cache keeps sink and residual frames outside pages and overrides this.)"""
        return [(0, min(self.sink_frames, end)), (self._ring_start(end), end)]

    def begin(self, start_frame: int, num_frames: int) -> None:
        """Plan a transformer call over frames [start_frame, start_frame + num_frames): evict, allocate,
        and commit the write/read indices to the device."""
        end = start_frame + num_frames
        prev_end = self.end_frame
        if start_frame > prev_end:
            raise ConfigError(f"KV cache write at frame {start_frame} leaves a gap: frames up to {prev_end} are cached")
        old_start = self._ring_start(prev_end)
        if any(self.sink_frames <= f < old_start for f in range(start_frame, min(end, prev_end))):
            raise ConfigError(f"frames from {start_frame} were already evicted from the window; cannot rewrite")
        new_end = max(prev_end, end)
        new_start = self._ring_start(new_end)
        # 1. evict: frames [old_start, new_start) leave the window (counted as the reference counts them)
        evicted = max(0, min(new_start, prev_end) - old_start)
        self.num_evictions += evicted
        self.num_eviction_events += evicted > 0
        # 2. free pages none of whose frames is still paged, then map pages for frames that now need one
        needed = {
            lp for a, b in self.paged_ranges(new_end) for lp in range(a // self.page_frames, -(-b // self.page_frames))
        }
        dead = [lp for lp in self.table.pages if lp not in needed]
        self.pool.free([self.table.remove(lp) for lp in dead])
        missing = sorted(lp for lp in needed if lp not in self.table)
        ids = self.pool.allocate(len(missing))
        if ids is None:  # only when frames are not page-aligned (e.g. a 1-frame first block) or global
            self._grow(
                max(2 * self.pool.num_pages, self.pool.num_pages + len(missing))
                if self.ring_frames is None
                else self.pool.num_pages + len(missing) - self.pool.num_free_pages
            )
            ids = self.pool.allocate(len(missing))
        for lp, pid in zip(missing, ids):
            self.table.add(lp, pid)
        self.end_frame = new_end
        # 3. plan: where this call writes, what it reads (chronological), and commit to the device
        live = tuple(self.resident_frames())
        self.plan = CallPlan(
            start_frame=start_frame,
            num_frames=num_frames,
            prev_end_frame=prev_end,
            end_frame=new_end,
            new_block=end > prev_end,
            write_frame_slots=self.frame_slots(range(start_frame, end)),
            live_frames=live,
            live_frame_slots=self.frame_slots(live),
        )
        self.store.commit(self.plan)
        self.num_calls += 1

    def frame_slots(self, frames: list[int] | range) -> np.ndarray:
        """Store frame slot of each frame, −1 for a frame that has no page (quantized cache: fp frames)."""
        pages, P = self.table.pages, self.page_frames
        return np.fromiter(
            (pages[f // P] * P + f % P if f // P in pages else -1 for f in frames), dtype=np.int64, count=len(frames)
        )

    def _grow(self, num_pages: int) -> None:
        if self.ring_frames is not None:
            log.warning(
                "KV page pool grows to %d pages: frames are not aligned to %d-frame pages", num_pages, self.page_frames
            )
        self.pool.grow(num_pages - self.pool.num_pages)
        self.store.grow(num_pages * self.page_frames)

    # -- state (world files): the store's buffers, the page table, the pool ------------------------
    state_kind = "paged"
    DENSE_STORES = ("paged", "offload")  # one format: the same slots, read in the same order

    def state_dict(self, prefix: str = "") -> Snapshot:
        meta = counters_of(self)
        pool = self.pool.state_dict()
        meta.update(
            kind=self.state_kind,
            store=self.store.kind,
            page_frames=self.page_frames,
            window_origin=self.window_origin,
            num_pages=pool["num_pages"],
            ref_counts=pool["ref_counts"],
            free=pool["free"],
            pool_counters=pool["pool_counters"],
            table=[[lp, pid] for lp, pid in self.table.pages.items()],  # insertion order kept
        )
        lists = self.store_state_lists(saving=True)
        meta.update(self.store.state_meta())
        return named_buffers(f"{prefix}store.", lists), meta

    def store_state_lists(self, saving: bool) -> dict[str, list[torch.Tensor]]:
        if not hasattr(self.store, "state_lists"):
            raise ConfigError(f"saving a world state with the '{self.store.kind}' KV store is not supported")
        return self.store.state_lists(self.frame_slots, saving=saving)

    def load_state_dict(self, tensors: dict, meta: dict, prefix: str = "") -> None:
        saved, here = meta.get("store", "paged"), self.store.kind
        if saved != here and not (saved in self.DENSE_STORES and here in self.DENSE_STORES):
            raise ConfigError(f"the saved KV pages are '{saved}' but this run's cache stores them as '{here}'")
        if meta["num_pages"] > self.pool.num_pages:
            self._grow(meta["num_pages"])
        load_named_buffers(f"{prefix}store.", self.store_state_lists(saving=False), tensors)
        self.pool.load_state_dict(meta)
        self.table.pages = {lp: pid for lp, pid in meta["table"]}
        set_counters(self, meta)
        self.window_origin = meta["window_origin"]
        self.plan = None
        self.store.load_state_meta(meta)

    # -- interface ---------------------------------------------------------------------------------
    def layer(self, index: int) -> LayerKV:
        return self._views[index]

    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this call's K/V (B, n, H, D); return the attention span (B, L, H, D), oldest first."""
        expected = self.plan.num_frames * self.spec.frame_tokens
        if k.shape[1] != expected:
            raise ConfigError(f"KV cache expected {expected} new tokens (from begin()), got {k.shape[1]}")
        return self.store.write_read(layer, k, v)

    def prefetch(self, layer: int) -> None:
        """Ask the store to start bringing `layer`'s pages in (offload); a no-op for resident stores."""
        self.store.prefetch(layer)

    def logical_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of `layer` in sink-then-chronological frame order (the reference's buffer order)."""
        frames = self.resident_frames()
        return self.store.read_frames(layer, frames, self.frame_slots(frames))

    @property
    def attended_tokens(self) -> int:
        """Tokens the last call attended to (the reference's local_end)."""
        return len(self.plan.live_frames) * self.spec.frame_tokens if self.plan else 0

    def reset(self) -> None:
        """Forget every frame; storage is kept and overwritten."""
        self.pool.reset()
        self.table.clear()
        self.store.reset()
        self.end_frame = 0
        self.reset_window()
        self.plan = None
        self.num_evictions = 0
        self.num_eviction_events = 0
        self.num_calls = 0

    def stats(self) -> dict:
        out = {
            "kind": self.store.kind,
            "page_frames": self.page_frames,
            "num_pages": self.pool.num_pages,
            "used_pages": self.pool.num_used_pages,
            "peak_used_pages": self.pool.peak_used,
            "page_usage": self.pool.usage(),
            "resident_frames": len(self.resident_frames()),
            "frames_written": self.end_frame,
            "evicted_frames": self.num_evictions,
            "eviction_events": self.num_eviction_events,
            "calls": self.num_calls,
        }
        out.update(self.store.stats())
        return out


def max_live_pages(sink_frames: int, ring_frames: int, page_frames: int) -> int:
    """Pages a window can touch at once: ⌈S/P⌉ for the sinks plus ⌈(R−1)/P⌉ + 1 for R consecutive frames
    that may start mid-page (R = 5, P = 3: frames 2..6 touch pages 0, 1, 2). When S, R and the block are
    multiples of P the ring part is exactly R/P (planned_pages); otherwise the pool grows once, logged."""
    return -(-sink_frames // page_frames) + -(-(ring_frames - 1) // page_frames) + 1


def planned_pages(config: KVCacheConfig, spec: KVCacheSpec) -> int:
    """Pages a paged cache allocates up front: what the window needs when frames are page-aligned, or the
    run's length when global. Quantized caches page only the middle (sink and residual stay fp)."""
    P = config.page_frames or spec.block_frames
    quant = config.quantization != "none"
    if config.is_global:
        planned = spec.max_frames or 8 * spec.block_frames
        return max(1, -(-(planned - (config.residual_frames if quant else 0)) // P))
    sink, ring = config.sink_frames, config.ring_frames
    if quant:
        sink, ring = 0, ring - config.residual_frames
    if ring <= 0:
        return max(1, -(-sink // P))
    aligned = sink % P == 0 and ring % P == 0 and spec.block_frames % P == 0
    return max(1, -(-sink // P) + (ring // P if aligned else max_live_pages(0, ring, P)))
