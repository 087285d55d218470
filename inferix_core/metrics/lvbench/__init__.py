"""LV-Bench: Video Drift Error (VDE) over equal chunks, VBench whole-video scores and FramePack's
start–end contrast, with labelled weight-free proxies when the networks' weights are absent."""

from .chunking import chunk_bounds, split_chunks, start_end_bounds, to_uint8_frames
from .frame_metrics import (
    aesthetic,
    background,
    background_proxy,
    clarity,
    clarity_proxy,
    dynamic,
    dynamic_proxy,
    motion,
    motion_proxy,
    score_frames,
    subject,
    subject_proxy,
)
from .networks import NETWORKS
from .prompts import load_prompt_schedule, load_prompt_schedules
from .report import LVBenchResult, MetricReport, format_table, mean_scores, plot_chunk_scores
from .scoring import DEFAULT_METRICS, METRICS, MetricBackend, resolve_backends, score_video
from .vde import drift_weights, start_end_contrast, vde

__all__ = [
    "DEFAULT_METRICS",
    "METRICS",
    "NETWORKS",
    "LVBenchResult",
    "MetricBackend",
    "MetricReport",
    "aesthetic",
    "background",
    "background_proxy",
    "chunk_bounds",
    "clarity",
    "clarity_proxy",
    "drift_weights",
    "dynamic",
    "dynamic_proxy",
    "format_table",
    "load_prompt_schedule",
    "load_prompt_schedules",
    "mean_scores",
    "motion",
    "motion_proxy",
    "plot_chunk_scores",
    "resolve_backends",
    "score_frames",
    "score_video",
    "split_chunks",
    "start_end_bounds",
    "start_end_contrast",
    "subject",
    "subject_proxy",
    "to_uint8_frames",
    "vde",
]
