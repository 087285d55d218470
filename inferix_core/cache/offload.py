"""Offloaded KV pages: cold layers' past window lives in pinned CPU memory and is streamed in per call.

Why per call and not once per block: every one of a block's calls (4 denoising steps + the context pass)
attends, in every layer, to the same past window, and the calls run layer 0..L−1 one after another. A
layer's past would have to stay on the GPU from its use in call 1 to its use in call 5, i.e. for every
layer at once: that is the resident cache. With bounded GPU memory the past of an offloaded layer
crosses PCIe once per call; what offload can avoid is everything else (docs/kv_cache.md, "Offload:
bytes and time"):

* the current block's K/V never crosses PCIe while the block is being denoised: every offloaded layer
  keeps it in a small device *block buffer* (block_frames · T tokens), rewritten by each call;
* the past (sink + older window frames, unchanged during a block) is streamed per call into one of
  2 rotating staging buffers, two offloaded layers ahead, on a side stream;
* the block is written back to the host once, when the first call of another block begins (after the
  context pass), on a second side stream.

Per offloaded layer j (ordinal among offloaded layers), per call::

    h2d:      [past pages of j → staging (s % 2)]        issued ≥ 2 offloaded layers ahead (s: rotation)
                 waits: staging free (gather of j−2 done), host pages hold the last write-back of j
    compute:  wait h2d(j) ─┘ → block_buf[j] ← k,v  → staging[w] ← k,v (index_copy_) → span = staging[r]
                 (waits write-back of block_buf[j] before overwriting it)  → record "staging free"
    d2h:      at the next block's begin(): block_buf[j] → host pages of the finished block (once)

Staging has the slot layout of the page store, so the write/read indices are the resident cache's and
the gathered span holds the same values in the same order: results are bitwise equal to the resident
paged cache. Side streams only touch persistent tensors (host pages, staging, block buffers), so the
caching allocator never sees a tensor used across streams (no record_stream) and nothing allocates in
the loop.

On CPU there are no streams; `HostLane` emulates one as a queue of deferred copies (same calls, same
events). By default a side copy runs only when something waits on its event, the latest moment a GPU
could run it, so a missing wait shows up on CPU as a wrong value (tests/cache/test_offload.py). It does
not combine with quantized pages yet (the factory says so).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import ConfigError
from .copy_lanes import ComputeLane, CudaLane, HostLane, elapsed_seconds
from .offload_layout import GiB, offload_layout
from .paged import CallPlan, DenseStore, PagedKVCache
from .spec import KVCacheConfig, KVCacheSpec
from .table import DeviceIndex, contiguous_runs, token_slots

log = logging.getLogger(__name__)


def _elem(spec: KVCacheSpec) -> int:
    return torch.empty((), dtype=spec.dtype).element_size()


class OffloadStore(DenseStore):
    """Resident layers as in DenseStore; offloaded layers in (pinned) host memory, see the module docstring."""

    kind = "offload"
    cpu_schedule = "deferred"  # HostLane schedule on CPU; tests run "eager" too

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, num_frame_slots: int):
        self.config, self.spec = config, spec
        self.num_frame_slots = num_frame_slots
        self.layout = offload_layout(config, spec)
        self.device = torch.device(spec.device)
        self.cuda = self.device.type == "cuda"
        self.ordinal = {layer: j for j, layer in enumerate(self.layout.offloaded)}
        self.m, self.d = self.layout.num_offloaded, self.layout.num_staging
        host = torch.device("cpu")
        self.k = [
            self._alloc(num_frame_slots, host if i in self.ordinal else None, self.cuda and i in self.ordinal)
            for i in range(spec.num_layers)
        ]
        self.v = [
            self._alloc(num_frame_slots, host if i in self.ordinal else None, self.cuda and i in self.ordinal)
            for i in range(spec.num_layers)
        ]
        self.stage_k = [self._alloc(num_frame_slots) for _ in range(self.d)]
        self.stage_v = [self._alloc(num_frame_slots) for _ in range(self.d)]
        self.blk_frames = spec.block_frames if self.m else 0  # capacity of a block buffer, in frames
        self.blk_k = [self._alloc(self.blk_frames) for _ in range(self.m)]
        self.blk_v = [self._alloc(self.blk_frames) for _ in range(self.m)]
        self.write_index = DeviceIndex(spec.device)
        self.read_index = DeviceIndex(spec.device)
        if self.cuda:
            self.compute = CudaLane(self.device, side=False)
            self.h2d, self.d2h = CudaLane(self.device, side=True), CudaLane(self.device, side=True)
        else:
            self.compute = ComputeLane()
            self.h2d, self.d2h = HostLane(self.cpu_schedule), HostLane(self.cpu_schedule)
        # hazards between lanes, kept across reset(): copies of a previous run may still be in flight
        self._buffer_free: list = [None] * self.d  # compute gathered from staging buffer b
        self._blk_written: list = [None] * self.m  # compute wrote block buffer j (the write-back waits)
        self._wb_done: list = [None] * self.m  # block buffer j is on the host (prefetch and overwrite wait)
        self._seq = 0  # staging rotation over every prefetch ever issued
        # write-backs a lane has not waited on yet (a stream is in order: one wait per write-back is enough)
        self._wb_unseen_h2d: set[int] = set()
        self._wb_unseen_compute: set[int] = set()
        self.reset()
        log.info(
            "KV offload: %d of %d layers on the host (%.2f GiB pinned), %d resident + %d staging + %d block buffers "
            "on %s (%.2f GiB)",
            self.m,
            spec.num_layers,
            self.layout.host_bytes / GiB,
            len(self.layout.resident),
            self.d,
            self.m,
            self.device,
            self.layout.device_bytes / GiB,
        )

    def reset(self) -> None:
        """Forget the frames (pending block buffers included); keep the events that order in-flight copies."""
        self._pending: list[tuple[int, ...]] = [()] * self.m  # frames block buffer j holds, newer than the host
        self._frames: tuple[int, ...] = ()
        self._past_runs: list[tuple[int, int, int]] = []
        self._past_tokens = 0
        self._issued: dict[int, tuple[int, object]] = {}  # ordinal → (staging buffer, h2d done event)
        self._next_issue = self._next_use = 0
        self._timings: list[tuple[str, object, object]] = []
        self._stalls: list[tuple[object, object]] = []
        self.h2d_bytes = self.d2h_bytes = 0
        self.h2d_seconds = self.d2h_seconds = self.stall_seconds = 0.0
        self.prefetch_hits = self.prefetch_ready = self.prefetch_misses = self.stalls_folded = 0
        self.writebacks = 0

    # -- per call (host) ---------------------------------------------------------------------------
    def commit(self, plan: CallPlan) -> None:
        """Indices to the device; write back a finished block; plan the past runs; issue the first prefetches.

        Past frames = live frames the call does not write. Their token slots, ascending, merged into runs of
        consecutive slots, are copied to the same slots of a staging buffer::

            live  f0 | f6 f7 f8 | f9 f10 f11  (write: f9..f11)    slots  0 | 15 16 17 | 3 4 5
            past  f0, f6..f8 → token runs [0·T, 1·T) and [15·T, 18·T)  (f9..f11 come from k, v)
        """
        super().commit(plan)
        if self.m == 0:
            return
        ft = self.spec.frame_tokens
        frames = tuple(range(plan.start_frame, plan.start_frame + plan.num_frames))
        if plan.num_frames > self.blk_frames:
            self._grow_block_buffers(plan.num_frames)
        slot_of = dict(zip(plan.live_frames, plan.live_frame_slots.tolist()))
        for j in range(self.m):  # 1. once per block: the finished block's K/V go to the host
            if self._pending[j] and self._pending[j] != frames:
                self._write_back(j, slot_of)
        written = set(frames)
        past = np.array(sorted(s for f, s in slot_of.items() if f not in written), dtype=np.int64)
        tokens = token_slots(past, ft)
        self._past_runs = contiguous_runs(tokens)  # (slot, _, length): same slots in host and staging
        self._past_tokens = int(tokens.size)
        self._frames = frames
        self._fold(limit=512)
        self._issued, self._next_issue, self._next_use = {}, 0, 0  # 2. a new call: prefetch from ordinal 0
        self._issue_ahead()

    def _issue_ahead(self) -> None:
        """Keep prefetches issued up to `d` ordinals past the last one used (in ordinal order)."""
        while self._next_issue < min(self.m, self._next_use + self.d):
            self._issue(self._next_issue)

    def prefetch(self, layer: int) -> None:
        """A hint: the store already prefetches `d` offloaded layers ahead, so this only issues in order."""
        j = self.ordinal.get(layer)
        if j is not None and j == self._next_issue and j < self._next_use + self.d:
            self._issue(j)

    def _issue(self, j: int) -> None:
        """h2d: the past frames of offloaded layer j → the next staging buffer, after it is free."""
        layer, buf = self.layout.offloaded[j], self._seq % self.d
        self._seq += 1
        self.h2d.wait(self._buffer_free[buf])  # the layer that used this buffer last has gathered from it
        if j in self._wb_unseen_h2d:  # the host pages must hold this layer's last written-back block
            self.h2d.wait(self._wb_done[j])
            self._wb_unseen_h2d.discard(j)
        hk, hv, sk, sv = self.k[layer], self.v[layer], self.stage_k[buf], self.stage_v[buf]
        pairs = [
            (s[b, a : a + n], h[b, a : a + n])
            for a, _, n in self._past_runs
            for b in range(hk.shape[0])
            for s, h in ((sk, hk), (sv, hv))
        ]
        start = self.h2d.record(timing=True)
        self.h2d.copies(pairs)
        done = self.h2d.record(timing=True)
        self._timings.append(("h2d", start, done))
        self.h2d_bytes += 2 * self._past_tokens * self._token_bytes()
        self._issued[j] = (buf, done)
        self._next_issue = j + 1

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        j = self.ordinal.get(layer)
        if j is None:
            return super().write_read(layer, k, v)
        if j in self._issued:
            self.prefetch_hits += 1
        else:  # used out of order (never in the pipeline): restart the prefetch chain here; correct, exposed
            self.prefetch_misses += 1
            self._issued, self._next_issue = {}, j
            self._issue(j)
        buf, ready = self._issued.pop(j)
        kb, vb = self.stage_k[buf], self.stage_v[buf]
        k, v = k.to(kb.dtype).contiguous(), v.to(vb.dtype).contiguous()
        n = k.shape[1]
        reach = self.compute.record(timing=True)
        self.compute.wait(ready)  # the past pages have landed in the staging buffer
        self._stalls.append((reach, ready))
        if j in self._wb_unseen_compute:  # the block buffer's last write-back has read it
            self.compute.wait(self._wb_done[j])
            self._wb_unseen_compute.discard(j)
        self.blk_k[j][:, :n].copy_(k)
        self.blk_v[j][:, :n].copy_(v)
        kb.index_copy_(1, self._w, k)
        vb.index_copy_(1, self._w, v)
        k_all, v_all = kb.index_select(1, self._r), vb.index_select(1, self._r)  # (B, L, H, D)
        used = self.compute.record()
        self._buffer_free[buf] = self._blk_written[j] = used
        self._pending[j] = self._frames
        self._next_use = j + 1
        self._issue_ahead()
        return k_all, v_all

    def _write_back(self, j: int, slot_of: dict[int, int]) -> None:
        """d2h: block buffer j → host pages of its frames that are still live; once per block."""
        ft, layer = self.spec.frame_tokens, self.layout.offloaded[j]
        keep = [(slot_of[f] * ft, i * ft) for i, f in enumerate(self._pending[j]) if f in slot_of]
        self._pending[j] = ()
        if not keep:  # the whole block left the window already (window < 2 blocks)
            return
        dst = np.array([d for d, _ in keep], dtype=np.int64)
        src = np.array([s for _, s in keep], dtype=np.int64)
        runs = _runs_frames(dst, src, ft)
        hk, hv, bk, bv = self.k[layer], self.v[layer], self.blk_k[j], self.blk_v[j]
        pairs = [
            (h[b, d : d + n], s[b, s0 : s0 + n])
            for d, s0, n in runs
            for b in range(hk.shape[0])
            for h, s in ((hk, bk), (hv, bv))
        ]
        self.d2h.wait(self._blk_written[j])
        start = self.d2h.record(timing=True)
        self.d2h.copies(pairs)
        done = self.d2h.record(timing=True)
        self._wb_done[j] = done
        self._wb_unseen_h2d.add(j)
        self._wb_unseen_compute.add(j)
        self._timings.append(("d2h", start, done))
        self.d2h_bytes += 2 * len(keep) * ft * self._token_bytes()
        self.writebacks += 1

    def _token_bytes(self) -> int:
        s = self.spec
        return s.batch_size * s.num_heads * s.head_dim * _elem(s)

    # -- inspection and growth (never in the loop) -------------------------------------------------
    def state_lists(self, frame_slots, saving: bool) -> dict[str, list[torch.Tensor]]:
        """Saving: per-layer K/V as the resident paged store would hold them, i.e. the host pages with the frames
        a block buffer holds and has not written back yet put into their slots of a copy (the live store is not
        changed), so a state saved with offload resumes with or without it. Loading: the buffers themselves."""
        if not saving:
            return {"k": self.k, "v": self.v}
        self._sync()  # every queued copy has landed (CPU lanes run their queues; CUDA synchronizes)
        ft = self.spec.frame_tokens
        ks, vs = list(self.k), list(self.v)
        for j, layer in enumerate(self.layout.offloaded):
            if not self._pending[j]:
                continue
            slots = frame_slots(list(self._pending[j]))
            if (slots < 0).any():
                raise ConfigError(
                    f"offloaded frames {list(self._pending[j])} have no page; save the world between blocks"
                )
            for out, blk in ((ks, self.blk_k[j]), (vs, self.blk_v[j])):
                merged = out[layer].clone()
                for i, s in enumerate(slots.tolist()):
                    merged[:, s * ft : (s + 1) * ft] = blk[:, i * ft : (i + 1) * ft].to(merged.device)
                out[layer] = merged
        return {"k": ks, "v": vs}

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        else:
            self.d2h.synchronize()
            self.h2d.synchronize()

    def read_frames(self, layer: int, frames: list[int], frame_slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        j = self.ordinal.get(layer)
        if j is None:
            return super().read_frames(layer, frames, frame_slots)
        self._sync()
        ft = self.spec.frame_tokens
        pending = {f: i for i, f in enumerate(self._pending[j])}
        out = []
        for store, blk in ((self.k[layer], self.blk_k[j]), (self.v[layer], self.blk_v[j])):
            parts = [
                blk[:, pending[f] * ft : (pending[f] + 1) * ft]
                if f in pending
                else store[:, s * ft : (s + 1) * ft].to(self.device)
                for f, s in zip(frames, frame_slots.tolist())
            ]
            out.append(torch.cat(parts, dim=1) if parts else blk[:, :0])
        return out[0], out[1]

    def _grow_block_buffers(self, frames: int) -> None:
        log.warning(
            "KV offload: a call writes %d frames, more than a block (%d); block buffers grow", frames, self.blk_frames
        )
        self._sync()
        for bufs in (self.blk_k, self.blk_v):
            for j, old in enumerate(bufs):
                bufs[j] = self._alloc(frames)
                bufs[j][:, : old.shape[1]].copy_(old)
        self.blk_frames = frames

    def grow(self, num_frame_slots: int) -> None:
        self._sync()  # rare (global attention past its planned length): no copy may be in flight

        def grown(t: torch.Tensor, host: bool) -> torch.Tensor:
            new = self._alloc(num_frame_slots, t.device, pin=host and self.cuda)
            new[:, : t.shape[1]].copy_(t)
            return new

        self.k = [grown(t, i in self.ordinal) for i, t in enumerate(self.k)]
        self.v = [grown(t, i in self.ordinal) for i, t in enumerate(self.v)]
        self.stage_k = [self._alloc(num_frame_slots) for _ in self.stage_k]
        self.stage_v = [self._alloc(num_frame_slots) for _ in self.stage_v]
        self.num_frame_slots = num_frame_slots

    # -- statistics --------------------------------------------------------------------------------
    def _fold(self, limit: int = 0) -> None:
        """Add finished copies' and waits' event times to the totals (query() never blocks)."""
        if len(self._timings) > limit:
            pending = []
            for kind, start, done in self._timings:
                secs = elapsed_seconds(start, done)
                if secs is None:
                    pending.append((kind, start, done))
                elif kind == "h2d":
                    self.h2d_seconds += secs
                else:
                    self.d2h_seconds += secs
            self._timings = pending
        if len(self._stalls) > limit:
            pending = []
            for reach, ready in self._stalls:
                secs = elapsed_seconds(reach, ready)
                if secs is None:
                    pending.append((reach, ready))
                    continue
                # CUDA: how long compute waited for the copy (negative: it had landed already). CPU: the
                # deferred copies ran inside the wait, so the whole copy time counts as exposed.
                self.stall_seconds += max(0.0, secs) if self.cuda else 0.0
                self.prefetch_ready += secs <= 0.0
                self.stalls_folded += 1
            self._stalls = pending

    def stats(self) -> dict:
        if not self.cuda:  # the emulated side streams finish, as a GPU eventually does
            self._sync()
        self._fold()
        dev = self.stage_k + self.stage_v + self.blk_k + self.blk_v
        dev += [t for i, t in enumerate(self.k + self.v) if (i % len(self.k)) not in self.ordinal]
        host = [t for i, t in enumerate(self.k + self.v) if (i % len(self.k)) in self.ordinal]
        uses = self.prefetch_hits + self.prefetch_misses
        h2d_s = self.h2d_seconds
        if not self.cuda:
            self.stall_seconds = h2d_s  # no overlap without streams
        return {
            "resident_bytes": sum(t.numel() * t.element_size() for t in dev),
            "offloaded_bytes": sum(t.numel() * t.element_size() for t in host),
            "offloaded_layers": list(self.layout.offloaded),
            "block_buffer_bytes": sum(t.numel() * t.element_size() for t in self.blk_k + self.blk_v),
            "h2d_bytes": self.h2d_bytes,
            "d2h_bytes": self.d2h_bytes,
            "h2d_seconds": h2d_s,
            "d2h_seconds": self.d2h_seconds,
            "transfer_seconds": h2d_s + self.d2h_seconds,
            "h2d_GBps": self.h2d_bytes / h2d_s / 1e9 if h2d_s > 0 else None,
            "writebacks": self.writebacks,
            # compute waiting on prefetches (CUDA events); 1 − stall/h2d is the hidden share measured directly
            "stall_seconds": self.stall_seconds,
            "hidden_h2d_pct": 100.0 * (1.0 - self.stall_seconds / h2d_s) if h2d_s > 0 else None,
            "pending_transfers": len(self._timings),
            "prefetch_hit_rate": self.prefetch_hits / uses if uses else 1.0,
            # CUDA only: share of offloaded-layer reads whose prefetch had already landed (no wait at all)
            "prefetch_ready_rate": (self.prefetch_ready / self.stalls_folded if self.stalls_folded else 1.0)
            if self.cuda
            else None,
        }


def _runs_frames(dst: np.ndarray, src: np.ndarray, ft: int) -> list[tuple[int, int, int]]:
    """Per-frame (dst token start, src token start) → runs (dst, src, length) where both sides continue.

    dst [9, 12, 0], src [0, 3, 6], T = 3  →  (9, 0, 6), (0, 6, 3)
    """
    out: list[tuple[int, int, int]] = []
    for d, s in zip(dst.tolist(), src.tolist()):
        if out and out[-1][0] + out[-1][2] == d and out[-1][1] + out[-1][2] == s:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + ft)
        else:
            out.append((d, s, ft))
    return out


class OffloadedKVCache(PagedKVCache):
    """PagedKVCache whose cold layers live in pinned host memory; see the module docstring."""

    kind = "offload"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec):
        super().__init__(config, spec, store_cls=OffloadStore)
