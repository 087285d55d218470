"""Run profiler: hooks the block loop calls, turned into a ``ProfileReport`` at the end.

The pipeline calls ``on_run_start``, ``stage(name)``, ``on_block_start/end`` and ``on_first_frame``
unconditionally (``NullProfiler`` makes them free), instead of ``if profile:`` branches in the loop. On
CUDA every span also records a pair of CUDA events, resolved once in ``report()`` so profiling adds no
device syncs mid-run; host times use ``time.perf_counter``. It measures; it never changes the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferix_core.errors import ConfigError
from inferix_core.profiling.report import BlockRecord, KVCacheSample, MemorySample, ProfileReport, StageRecord

logger = logging.getLogger(__name__)

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    """Resident set size now: /proc on Linux, else the peak from getrusage (the best portable figure)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak RSS of this process; ``ru_maxrss`` is KiB on Linux and bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class NullProfiler:
    """Same hooks, doing nothing: the default, so the block loop never branches on profiling."""

    def on_run_start(self, meta: Mapping[str, Any] | None = None) -> None: ...
    def on_run_end(self) -> None: ...
    def on_block_start(self, block_index: int) -> None: ...
    def on_block_end(self, block_index: int, num_pixel_frames: int) -> None: ...
    def on_first_frame(self) -> None: ...
    def record_kv_cache(self, stats: Mapping[str, float]) -> None: ...

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        yield


class _Span:
    """Host start/end plus optional CUDA events for one stage or block."""

    __slots__ = ("end_event", "end_s", "start_event", "start_s")

    def __init__(self, start_s: float, start_event: Any):
        self.start_s, self.start_event = start_s, start_event
        self.end_s: float | None = None
        self.end_event: Any = None


class Profiler(NullProfiler):
    """Collects per-stage and per-block timings, memory and KV-cache stats for one run.

    Args:
        device: the device the model runs on; CUDA enables events and GPU memory readings.
        trace_path: if set, also run ``torch.profiler`` and export a Chrome trace there at run end.
    """

    def __init__(self, device: str | torch.device = "cpu", trace_path: str | os.PathLike[str] | None = None):
        self.device = torch.device(device)
        self.use_cuda = self.device.type == "cuda"
        if self.use_cuda and not torch.cuda.is_available():
            raise ConfigError(f"Profiler device is {self.device} but CUDA is not available; pass device='cpu'.")
        self.trace_path = Path(trace_path) if trace_path is not None else None
        self.meta: dict[str, Any] = {}
        self._t0: float | None = None
        self._t_end: float | None = None
        self._first_frame_s: float | None = None
        self._blocks: dict[int, tuple[_Span, int]] = {}
        self._current_block: int | None = None
        self._stages: list[tuple[str, int | None, _Span]] = []
        self._memory: list[MemorySample] = []
        self._kv: list[KVCacheSample] = []
        self._torch_profiler: Any = None

    # -- clocks --------------------------------------------------------------------------------------
    def _now(self) -> float:
        if self._t0 is None:
            raise ConfigError("Profiler hook called before on_run_start(); call it once before the block loop.")
        return time.perf_counter() - self._t0

    def _event(self) -> Any:
        if not self.use_cuda:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _sample_memory(self, label: str) -> None:
        allocated = peak = None
        if self.use_cuda:  # host-side counters of the caching allocator: no sync
            allocated = torch.cuda.memory_allocated(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        self._memory.append(MemorySample(self._now(), label, current_rss_bytes(), allocated, peak))

    # -- hooks ---------------------------------------------------------------------------------------
    def on_run_start(self, meta: Mapping[str, Any] | None = None) -> None:
        """Start the clock (and the torch trace); ``meta`` (model, resolution, steps…) goes into the report."""
        self.meta = dict(meta or {})
        if self.use_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.trace_path is not None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.use_cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._torch_profiler = torch.profiler.profile(activities=activities, record_shapes=False)
            self._torch_profiler.__enter__()
        self._t0 = time.perf_counter()
        self._sample_memory("run_start")

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a named stage (``text_encode``, ``denoise_step``, ``context``, ``decode``, ``sink``…)."""
        span = _Span(self._now(), self._event())
        scope = torch.profiler.record_function(name) if self._torch_profiler else contextlib.nullcontext()
        try:
            with scope:
                yield
        finally:
            span.end_event, span.end_s = self._event(), self._now()
            self._stages.append((name, self._current_block, span))

    def on_block_start(self, block_index: int) -> None:
        self._current_block = block_index
        self._blocks[block_index] = (_Span(self._now(), self._event()), 0)

    def on_block_end(self, block_index: int, num_pixel_frames: int) -> None:
        """Close the block; ``num_pixel_frames`` decoded frames count towards FPS."""
        if block_index not in self._blocks:
            raise ConfigError(f"on_block_end({block_index}) without on_block_start({block_index}).")
        span, _ = self._blocks[block_index]
        span.end_event, span.end_s = self._event(), self._now()
        self._blocks[block_index] = (span, num_pixel_frames)
        self._current_block = None
        if num_pixel_frames > 0 and self._first_frame_s is None:
            self._first_frame_s = span.end_s
        self._sample_memory(f"block {block_index}")

    def on_first_frame(self) -> None:
        """Mark when the first pixel frame is ready, if earlier than the end of its block."""
        if self._first_frame_s is None:
            self._first_frame_s = self._now()

    def record_kv_cache(self, stats: Mapping[str, float]) -> None:
        """Keep a snapshot of the cache layer's numbers (used frames, bytes, evictions, …)."""
        self._kv.append(KVCacheSample(self._now(), self._current_block, {k: float(v) for k, v in stats.items()}))

    def on_run_end(self) -> None:
        """Stop the clock and the torch trace (exported to ``trace_path``)."""
        self._t_end = self._now()
        self._sample_memory("run_end")
        if self._torch_profiler is not None:
            self._torch_profiler.__exit__(None, None, None)
            self._torch_profiler.export_chrome_trace(str(self.trace_path))
            logger.info("torch.profiler trace written to %s", self.trace_path)
            self._torch_profiler = None

    # -- result --------------------------------------------------------------------------------------
    def _gpu_s(self, span: _Span) -> float | None:
        if span.start_event is None or span.end_event is None:
            return None
        return span.start_event.elapsed_time(span.end_event) / 1000.0

    def report(self) -> ProfileReport:
        """Resolve CUDA events (one sync) and summarise; calls ``on_run_end`` if it was not called."""
        if self._t_end is None:
            self.on_run_end()
        if self.use_cuda:
            torch.cuda.synchronize(self.device)
        blocks = [
            BlockRecord(i, span.start_s, span.end_s - span.start_s, frames, self._gpu_s(span))
            for i, (span, frames) in sorted(self._blocks.items())
            if span.end_s is not None
        ]
        stages = [StageRecord(n, b, s.start_s, s.end_s - s.start_s, self._gpu_s(s)) for n, b, s in self._stages]
        totals: dict[str, dict[str, float]] = {}
        for stage in stages:
            total = totals.setdefault(stage.name, {"count": 0, "wall_s": 0.0, "gpu_s": 0.0})
            total["count"] += 1
            total["wall_s"] += stage.wall_s
            total["gpu_s"] += stage.gpu_s or 0.0
        num_frames = sum(b.num_frames for b in blocks)
        last_end = max((b.start_s + b.wall_s for b in blocks), default=None)
        fps = num_frames / last_end if last_end else None
        steady_fps = None
        if len(blocks) > 1 and last_end > blocks[0].start_s + blocks[0].wall_s:
            first_end = blocks[0].start_s + blocks[0].wall_s
            steady_fps = (num_frames - blocks[0].num_frames) / (last_end - first_end)
        latencies = np.array([b.wall_s for b in blocks]) if blocks else np.zeros(0)
        latency = (
            {"median": float(np.median(latencies)), "p90": float(np.percentile(latencies, 90)),
             "max": float(latencies.max()), "mean": float(latencies.mean())}
            if len(latencies) else {}
        )  # fmt: skip
        return ProfileReport(
            device=str(self.device), wall_s=float(self._t_end), num_frames=num_frames, fps=fps,
            steady_fps=steady_fps, time_to_first_frame_s=self._first_frame_s, block_latency_s=latency,
            blocks=blocks, stages=stages, stage_totals=totals, memory=list(self._memory),
            peak_rss_bytes=peak_rss_bytes(),
            peak_gpu_bytes=torch.cuda.max_memory_allocated(self.device) if self.use_cuda else None,
            kv_cache=list(self._kv), meta=self.meta,
            trace_path=str(self.trace_path) if self.trace_path else None,
        )  # fmt: skip
