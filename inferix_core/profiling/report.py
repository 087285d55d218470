"""The profile of one run as plain data: dataclasses that round-trip through JSON.

Produced by ``Profiler.report()``; rendered as a page by ``html_report.render_html(report)`` (which reads this
module, never the other way). Times are seconds from the run start (host ``perf_counter``); ``gpu_s`` fields are
CUDA-event durations, ``None`` on CPU.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StageRecord:
    """One ``stage(name)`` span; ``block_index`` is the block it ran in, ``None`` outside blocks."""

    name: str
    block_index: int | None
    start_s: float
    wall_s: float
    gpu_s: float | None = None


@dataclass
class BlockRecord:
    """One block from ``on_block_start`` to ``on_block_end`` (denoise, context pass, decode, sinks)."""

    index: int
    start_s: float
    wall_s: float
    num_frames: int
    gpu_s: float | None = None


@dataclass
class MemorySample:
    """Memory at one moment: process RSS and, on CUDA, allocated / peak-allocated bytes."""

    t_s: float
    label: str
    rss_bytes: int
    gpu_allocated_bytes: int | None = None
    gpu_peak_bytes: int | None = None


@dataclass
class KVCacheSample:
    """Numbers the cache layer reported (e.g. ``used_frames``, ``bytes``, ``evictions``) at one block."""

    t_s: float
    block_index: int | None
    stats: dict[str, float]


@dataclass
class ProfileReport:
    """Everything measured in one run. ``fps`` is decoded pixel frames / seconds from run start to last block."""

    device: str
    wall_s: float
    num_frames: int
    fps: float | None
    steady_fps: float | None  # frames after the first block / time after it: excludes warm-up and text encode
    time_to_first_frame_s: float | None
    block_latency_s: dict[str, float]  # median, p90, max, mean over blocks
    blocks: list[BlockRecord] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    stage_totals: dict[str, dict[str, float]] = field(default_factory=dict)  # name → count, wall_s, gpu_s
    memory: list[MemorySample] = field(default_factory=list)
    peak_rss_bytes: int = 0
    peak_gpu_bytes: int | None = None
    kv_cache: list[KVCacheSample] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    trace_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        """JSON text; ``ProfileReport.from_json(r.to_json()) == r``."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileReport:
        data = dict(data)
        data["blocks"] = [BlockRecord(**b) for b in data.get("blocks", [])]
        data["stages"] = [StageRecord(**s) for s in data.get("stages", [])]
        data["memory"] = [MemorySample(**m) for m in data.get("memory", [])]
        data["kv_cache"] = [KVCacheSample(**k) for k in data.get("kv_cache", [])]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> ProfileReport:
        return cls.from_dict(json.loads(text))
