"""Offloaded KV pages: cold layers' pages live in pinned CPU memory and are prefetched layer by layer.

Which layers are offloaded is decided from the GPU budget (`offload_layout`): all of them with
offload="always", otherwise as few as the budget requires, spread evenly over the depth so that the
compute of resident layers in between hides the transfers. Per offloaded layer, per call:

    h2d stream:   [prefetch L_j → staging j%2]          (issued two offloaded layers ahead)
    compute:          wait ─┘ write new K/V into staging, gather the span, attend ...
    d2h stream:                      └─ write the call's new K/V back to the host pages (async)

Results are bitwise equal to the resident paged cache: the same index_copy_/index_select run on the
same values, only the place the older pages come from differs. On CPU there are no streams: the
"host" store is a second tensor store and every copy runs inline, so tests cover the same logic.
It does not combine with quantized pages yet (the factory says so).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import CacheBudgetError
from .paged import CallPlan, DenseStore, PagedKVCache, planned_pages
from .spec import KVCacheConfig, KVCacheSpec
from .table import DeviceIndex, contiguous_runs, token_slots

log = logging.getLogger(__name__)

GiB = 1024**3


@dataclass(frozen=True)
class OffloadLayout:
    """Which layers keep their pages on the GPU and which stream them from pinned host memory."""

    offloaded: tuple[int, ...]
    resident: tuple[int, ...]
    layer_bytes: int  # K and V page storage of one layer
    num_staging: int  # device buffers the offloaded layers rotate through

    @property
    def num_offloaded(self) -> int:
        return len(self.offloaded)

    @property
    def device_bytes(self) -> int:
        return (len(self.resident) + self.num_staging) * self.layer_bytes

    @property
    def host_bytes(self) -> int:
        return len(self.offloaded) * self.layer_bytes


def offload_layout(config: KVCacheConfig, spec: KVCacheSpec) -> OffloadLayout:
    """Choose the offloaded layers for `config.offload` and `config.gpu_budget_bytes`.

    With m of L layers offloaded, layer i is offloaded when ⌊(i+1)·m/L⌋ > ⌊i·m/L⌋, which spreads them
    evenly (L = 6, m = 2: layers 2 and 5), so every transfer has L/m layers of compute to hide behind.
    """
    slots = planned_pages(config, spec) * (config.page_frames or spec.block_frames)
    layer_bytes = 2 * slots * spec.frame_tokens * spec.num_heads * spec.head_dim * spec.batch_size * _elem(spec)
    num_layers = spec.num_layers
    budget = config.gpu_budget_bytes
    if config.offload == "off" or (config.offload == "auto" and (budget is None or budget >= num_layers * layer_bytes)):
        m = 0
    elif config.offload == "always" or budget is None:
        m = num_layers
    else:  # fewest offloaded layers m whose resident layers + staging buffers fit the budget
        fits = [m for m in range(1, num_layers + 1) if (num_layers - m + min(2, m)) * layer_bytes <= budget]
        if not fits:
            raise CacheBudgetError(
                f"offloaded KV cache needs {min(2, num_layers)} staging layers of {layer_bytes / GiB:.2f} GiB on the "
                f"GPU but gpu_budget_bytes is {budget / GiB:.2f} GiB. Lower window_frames, set "
                "quantization='int8', or raise gpu_budget_bytes."
            )
        m = fits[0]
    offloaded = tuple(i for i in range(num_layers) if (i + 1) * m // num_layers > i * m // num_layers)
    resident = tuple(i for i in range(num_layers) if i not in offloaded)
    return OffloadLayout(offloaded, resident, layer_bytes, min(2, m))


def _elem(spec: KVCacheSpec) -> int:
    return torch.empty((), dtype=spec.dtype).element_size()


class OffloadStore(DenseStore):
    """Resident layers as in DenseStore; offloaded layers in (pinned) host memory plus staging buffers."""

    kind = "offload"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, num_frame_slots: int):
        self.config, self.spec = config, spec
        self.num_frame_slots = num_frame_slots
        self.layout = offload_layout(config, spec)
        self.device = torch.device(spec.device)
        self.cuda = self.device.type == "cuda"
        self.ordinal = {layer: j for j, layer in enumerate(self.layout.offloaded)}
        host, pin = torch.device("cpu"), self.cuda
        self.k = [self._alloc(num_frame_slots, host if i in self.ordinal else None, pin and i in self.ordinal)
                  for i in range(spec.num_layers)]
        self.v = [self._alloc(num_frame_slots, host if i in self.ordinal else None, pin and i in self.ordinal)
                  for i in range(spec.num_layers)]
        n = self.layout.num_staging
        self.stage_k = [self._alloc(num_frame_slots) for _ in range(n)]
        self.stage_v = [self._alloc(num_frame_slots) for _ in range(n)]
        self.write_index = DeviceIndex(spec.device)
        self.read_index = DeviceIndex(spec.device)
        if self.cuda:
            self.h2d = torch.cuda.Stream(device=self.device)
            self.d2h = torch.cuda.Stream(device=self.device)
        self._runs: list[tuple[int, int, int]] = []
        self.reset()
        log.info(
            "KV offload: %d of %d layers on the host (%.2f GiB pinned), %d resident + %d staging on %s (%.2f GiB)",
            self.layout.num_offloaded, spec.num_layers, self.layout.host_bytes / GiB, len(self.layout.resident),
            n, self.device, self.layout.device_bytes / GiB,
        )

    def reset(self) -> None:
        self._issued: dict[int, torch.cuda.Event | None] = {}
        self._used: set[int] = set()  # offloaded ordinals whose staging buffer was gathered from this call
        self._buffer_free: dict[int, torch.cuda.Event] = {}
        self._writeback_done: dict[int, torch.cuda.Event] = {}
        self._timings: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.h2d_bytes = self.d2h_bytes = 0
        self.h2d_seconds = self.d2h_seconds = 0.0
        self.prefetch_hits = self.prefetch_ready = self.prefetch_misses = 0

    # -- per call ----------------------------------------------------------------------------------
    def commit(self, plan: CallPlan) -> None:
        """Indices to the device, write-back runs on the host, and the first two prefetches issued."""
        super().commit(plan)
        self._runs = contiguous_runs(token_slots(plan.write_frame_slots, self.spec.frame_tokens))
        self._issued, self._used = {}, set()
        self._fold_timings(limit=256)
        for j in range(self.layout.num_staging):
            self._issue(j)

    def prefetch(self, layer: int) -> None:
        """Start bringing `layer`'s pages in, if it is offloaded and its staging buffer is free."""
        j = self.ordinal.get(layer)
        n = self.layout.num_staging
        if j is not None and j not in self._issued and (j < n or j - n in self._used):
            self._issue(j)

    def _issue(self, j: int) -> None:
        layer, buf = self.layout.offloaded[j], j % self.layout.num_staging
        nbytes = 2 * self.k[layer].numel() * self.k[layer].element_size()
        self.h2d_bytes += nbytes
        if not self.cuda:
            t0 = time.perf_counter()
            self.stage_k[buf].copy_(self.k[layer])
            self.stage_v[buf].copy_(self.v[layer])
            self.h2d_seconds += time.perf_counter() - t0
            self._issued[j] = None
            return
        start, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.h2d):
            if buf in self._buffer_free:  # the layer that used this buffer last has gathered from it
                self.h2d.wait_event(self._buffer_free[buf])
            if layer in self._writeback_done:  # the host pages hold the last call's writes
                self.h2d.wait_event(self._writeback_done[layer])
            start.record(self.h2d)
            self.stage_k[buf].copy_(self.k[layer], non_blocking=True)
            self.stage_v[buf].copy_(self.v[layer], non_blocking=True)
            done.record(self.h2d)
        self._timings.append(("h2d", start, done))
        self._issued[j] = done

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        j = self.ordinal.get(layer)
        if j is None:
            return super().write_read(layer, k, v)
        if j not in self._issued:  # nobody prefetched it: fetch on demand (correct, but exposed)
            self.prefetch_misses += 1
            self._issue(j)
        else:
            self.prefetch_hits += 1
        buf = j % self.layout.num_staging
        kb, vb = self.stage_k[buf], self.stage_v[buf]
        k, v = k.to(kb.dtype).contiguous(), v.to(vb.dtype).contiguous()
        if self.cuda:
            ready = self._issued[j]
            self.prefetch_ready += bool(ready.query())  # already arrived: the transfer was fully hidden
            torch.cuda.current_stream(self.device).wait_event(ready)
        kb.index_copy_(1, self._w, k)
        vb.index_copy_(1, self._w, v)
        k_all, v_all = kb.index_select(1, self._r), vb.index_select(1, self._r)  # (B, L, H, D)
        self._write_back(layer, buf, k, v)
        self._used.add(j)
        nxt = j + self.layout.num_staging
        if nxt < self.layout.num_offloaded:
            self._issue(nxt)
        return k_all, v_all

    def _write_back(self, layer: int, buf: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Copy this call's new K/V into the layer's host pages (runs of consecutive token slots)."""
        hk, hv = self.k[layer], self.v[layer]
        self.d2h_bytes += 2 * k.numel() * k.element_size()
        if not self.cuda:
            t0 = time.perf_counter()
            for b in range(k.shape[0]):
                for dst, src, n in self._runs:
                    hk[b, dst : dst + n].copy_(k[b, src : src + n])
                    hv[b, dst : dst + n].copy_(v[b, src : src + n])
            self.d2h_seconds += time.perf_counter() - t0
            return
        compute = torch.cuda.current_stream(self.device)
        gathered = compute.record_event()
        self._buffer_free[buf] = gathered
        start, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_event(gathered)
            start.record(self.d2h)
            for b in range(k.shape[0]):
                for dst, src, n in self._runs:
                    hk[b, dst : dst + n].copy_(k[b, src : src + n], non_blocking=True)
                    hv[b, dst : dst + n].copy_(v[b, src : src + n], non_blocking=True)
            done.record(self.d2h)
        k.record_stream(self.d2h)  # keep the allocator from reusing k/v before the copy has run
        v.record_stream(self.d2h)
        self._writeback_done[layer] = done
        self._timings.append(("d2h", start, done))

    # -- inspection --------------------------------------------------------------------------------
    def read_frames(self, layer: int, frames: list[int], frame_slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if layer not in self.ordinal:
            return super().read_frames(layer, frames, frame_slots)
        if self.cuda:
            torch.cuda.synchronize(self.device)  # inspection only, never in the loop
        idx = torch.from_numpy(token_slots(frame_slots, self.spec.frame_tokens))
        return self.k[layer].index_select(1, idx).to(self.device), self.v[layer].index_select(1, idx).to(self.device)

    def _fold_timings(self, limit: int = 0) -> None:
        """Add finished copies' event times to the totals (query() never blocks)."""
        if len(self._timings) <= limit:
            return
        pending = []
        for kind, start, done in self._timings:
            if done.query():
                secs = start.elapsed_time(done) / 1000.0
                if kind == "h2d":
                    self.h2d_seconds += secs
                else:
                    self.d2h_seconds += secs
            else:
                pending.append((kind, start, done))
        self._timings = pending

    def grow(self, num_frame_slots: int) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)  # rare (global attention past its planned length)

        def grown(t: torch.Tensor, host: bool) -> torch.Tensor:
            new = self._alloc(num_frame_slots, t.device, pin=host and self.cuda)
            new[:, : t.shape[1]].copy_(t)
            return new

        self.k = [grown(t, i in self.ordinal) for i, t in enumerate(self.k)]
        self.v = [grown(t, i in self.ordinal) for i, t in enumerate(self.v)]
        self.stage_k = [self._alloc(num_frame_slots) for _ in self.stage_k]
        self.stage_v = [self._alloc(num_frame_slots) for _ in self.stage_v]
        self.num_frame_slots = num_frame_slots

    def stats(self) -> dict:
        self._fold_timings()
        dev = [t for i, t in enumerate(self.k + self.v) if (i % len(self.k)) not in self.ordinal]
        host = [t for i, t in enumerate(self.k + self.v) if (i % len(self.k)) in self.ordinal]
        uses = self.prefetch_hits + self.prefetch_misses
        return {
            "resident_bytes": sum(t.numel() * t.element_size() for t in dev + self.stage_k + self.stage_v),
            "offloaded_bytes": sum(t.numel() * t.element_size() for t in host),
            "offloaded_layers": list(self.layout.offloaded),
            "h2d_bytes": self.h2d_bytes,
            "d2h_bytes": self.d2h_bytes,
            "h2d_seconds": self.h2d_seconds,
            "d2h_seconds": self.d2h_seconds,
            "transfer_seconds": self.h2d_seconds + self.d2h_seconds,
            "pending_transfers": len(self._timings),
            "prefetch_hit_rate": self.prefetch_hits / uses if uses else 1.0,
            # CUDA only: share of offloaded-layer reads whose prefetch had already landed (no wait at all)
            "prefetch_ready_rate": (self.prefetch_ready / uses if uses else 1.0) if self.cuda else None,
        }


class OffloadedKVCache(PagedKVCache):
    """PagedKVCache whose cold layers live in pinned host memory; see the module docstring."""

    kind = "offload"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec):
        super().__init__(config, spec, store_cls=OffloadStore)
