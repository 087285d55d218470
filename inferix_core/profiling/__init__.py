"""Run profiling: pipeline hooks (``Profiler``), the report as data (``ProfileReport``) and its HTML page and text."""

from inferix_core.profiling.live_bytes import LiveBytes
from inferix_core.profiling.profiler import NullProfiler, Profiler, current_rss_bytes, peak_rss_bytes
from inferix_core.profiling.report import BlockRecord, KVCacheSample, MemorySample, ProfileReport, StageRecord
from inferix_core.profiling.text_report import format_profile

__all__ = [
    "BlockRecord", "KVCacheSample", "LiveBytes", "MemorySample", "NullProfiler", "ProfileReport", "Profiler", "StageRecord",
    "current_rss_bytes", "format_profile", "peak_rss_bytes",
]  # fmt: skip
