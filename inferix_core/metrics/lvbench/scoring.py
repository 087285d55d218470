"""Score a video for LV-Bench: choose a backend per metric, chunk, score, and fill an LVBenchResult.

Backends are chosen once (`resolve_backends`) and can be reused across videos. A metric whose network
is missing falls back to its proxy with a warning naming the missing file; aesthetic quality has no
proxy and is reported unavailable. Per-frame networks run once per video: chunk, whole-video and
start/end scores all aggregate the same per-frame outputs.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import BackendUnavailableError, CheckpointLayoutError, ConfigError, MissingFileError
from . import base_metrics as bm
from . import networks, proxies
from .chunking import chunk_bounds, dynamic_stride, start_end_bounds, to_uint8_frames
from .report import LVBenchResult, MetricReport
from .vde import drift_weights, start_end_contrast, vde

log = logging.getLogger(__name__)

METRICS = ("clarity", "motion", "aesthetic", "background", "subject", "dynamic")
# The five VDE metrics of the published LV-Bench table; dynamic degree is opt-in.
DEFAULT_METRICS = ("clarity", "motion", "aesthetic", "background", "subject")
DEFAULT_FPS = 16.0  # Wan's frame rate; only used to sample dynamic degree at ~8 fps when fps is unknown


@dataclass(frozen=True)
class MetricBackend:
    """How one metric is computed: per-frame outputs + an aggregate, or a score on a frame range."""

    metric: str
    is_proxy: bool
    description: str
    per_frame: Callable[[np.ndarray], Any] | None = None  # frames → [T] scores or [T, D] features
    aggregate: Callable[[Any], float] | None = None  # a slice of per_frame's output → score
    score: Callable[..., float] | None = None  # frames → score, for non-decomposable metrics
    min_frames: int = 1  # fewest frames the formula is defined on (FramePack start/end windows)
    sample_8fps: bool = False  # dynamic degree: frames sampled at ~8 fps, `score` also takes fps=
    unavailable: str | None = None


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x))


def _try_load(loader: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run a loader; on a missing file or package return (None, reason) instead of raising."""
    try:
        return loader(), None
    except (MissingFileError, BackendUnavailableError) as exc:
        return None, str(exc)


def resolve_backends(
    metrics: Sequence[str] = DEFAULT_METRICS,
    weights_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    interpolator: bm.Interpolator | None = None,
) -> dict[str, MetricBackend]:
    """Pick the network-backed backend of each metric when its files are present, else its proxy.

    Args:
        interpolator: a frame interpolator (e.g. the user's own AMT-S wrapper) for the published motion
            smoothness; without one the linear-interpolation proxy is used.
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ConfigError(f"Unknown LV-Bench metric(s) {unknown}. Expected some of {list(METRICS)}.")
    wd, out = weights_dir, {}

    def fallback(metric: str, reason: str, proxy: str) -> None:
        log.warning("%s -> reporting '%s_proxy' (%s), NOT the published metric.", reason, metric, proxy)

    for m in metrics:
        if m == "clarity":
            net, why = _try_load(lambda: networks.load_musiq(networks.locate(wd, "musiq_spaq"), device))
            if net is not None:
                out[m] = MetricBackend(
                    m, False, "MUSIQ-SPAQ (pyiqa)", lambda f, n=net: bm.imaging_quality_frame_scores(f, n), _mean
                )
            else:
                fallback(m, why, "Laplacian-variance sharpness")
                out[m] = MetricBackend(
                    m, True, "Laplacian-variance sharpness (proxy)", proxies.laplacian_variance_frames, _mean
                )
        elif m == "motion":
            if interpolator is not None:
                out[m] = MetricBackend(
                    m,
                    False,
                    "user-supplied frame interpolator",
                    score=lambda f: bm.motion_smoothness(f, interpolator),
                    min_frames=3,
                )
            else:
                log.info(
                    "Motion smoothness: VBench's AMT-S interpolator has no maintained package to load it "
                    "with; reporting 'motion_proxy' (linear interpolation of even frames)."
                )
                out[m] = MetricBackend(
                    m,
                    True,
                    "linear-interpolation error (proxy)",
                    score=lambda f: bm.motion_smoothness(f, proxies.linear_interpolate),
                    min_frames=3,
                )
        elif m == "aesthetic":

            def load_aesthetic() -> tuple[torch.nn.Module, torch.nn.Module]:
                clip = networks.load_clip_vision(networks.locate(wd, "clip_l14"), device)
                head = networks.load_aesthetic_head(networks.locate(wd, "aesthetic_head"), device)
                if head.in_features != clip.config.projection_dim:
                    raise CheckpointLayoutError(
                        f"The aesthetic head takes {head.in_features}-d embeddings but the CLIP in "
                        f"'{networks.NETWORKS['clip_l14'].relpath}' projects to {clip.config.projection_dim}; "
                        "LAION's head needs CLIP ViT-L/14 (768)."
                    )
                return clip, head

            nets, why = _try_load(load_aesthetic)
            if nets is not None:
                out[m] = MetricBackend(
                    m, False, "LAION head on CLIP ViT-L/14", lambda f, n=nets: bm.aesthetic_frame_scores(f, *n), _mean
                )
            else:
                log.warning("%s -> aesthetic quality is unavailable (it has no credible weight-free proxy).", why)
                out[m] = MetricBackend(m, False, "unavailable", unavailable=f"no weight-free proxy; {why}")
        elif m in ("background", "subject"):  # feature consistency: a network's features, else a proxy's
            load, network, key, features, proxy, proxy_features = {
                "background": (
                    networks.load_clip_vision,
                    "CLIP ViT-B/32",
                    "clip_b32",
                    bm.clip_image_embeddings,
                    "colour-histogram similarity",
                    proxies.colour_histogram_features,
                ),
                "subject": (
                    networks.load_dino,
                    "DINO ViT-B/16",
                    "dino_b16",
                    bm.dino_cls_features,
                    "perceptual-hash structure similarity",
                    proxies.structure_features,
                ),
            }[m]
            net, why = _try_load(lambda load=load, key=key: load(networks.locate(wd, key), device))
            if net is not None:
                out[m] = MetricBackend(
                    m,
                    False,
                    network,
                    lambda f, n=net, fn=features: fn(f, n),
                    bm.consistency_from_features,
                    min_frames=2,
                )
            else:
                fallback(m, why, proxy)
                out[m] = MetricBackend(
                    m, True, f"{proxy} (proxy)", proxy_features, bm.consistency_from_features, min_frames=2
                )
        elif m == "dynamic":
            flow, why = _try_load(lambda: networks.load_raft_flow(networks.locate(wd, "raft_large"), device))
            if flow is None:
                fallback(m, why, "block-matching flow")
                flow = proxies.block_matching_flow
            out[m] = MetricBackend(
                m,
                why is not None,
                "RAFT" if why is None else "block-matching flow (proxy)",
                score=lambda f, fl=flow, fps=None: bm.dynamic_degree(f, fl, fps),
                min_frames=2,
                sample_8fps=True,
            )
    return out


def _score_metric(backend: MetricBackend, frames: np.ndarray, num_chunks: int, weighting: str) -> MetricReport:
    """Per-chunk scores, VDE, whole-video score and FramePack start–end contrast of one metric."""
    report = MetricReport(backend.metric, backend.is_proxy, backend.description, unavailable=backend.unavailable)
    if backend.unavailable is not None:
        return report
    bounds = chunk_bounds(len(frames), num_chunks)
    if bounds is None:
        report.unavailable = f"{len(frames)} frames (after sampling) for {num_chunks} chunks"
        return report
    start, end = start_end_bounds(len(frames), min_frames=backend.min_frames)
    if backend.per_frame is not None:
        per_frame = backend.per_frame(frames)

        def on(r: range | tuple[int, int]) -> float:
            a, b = (r.start, r.stop) if isinstance(r, range) else r
            return backend.aggregate(per_frame[a:b])
    else:

        def on(r: range | tuple[int, int]) -> float:
            a, b = (r.start, r.stop) if isinstance(r, range) else r
            return backend.score(frames[a:b])

    report.chunk_scores = [on(b) for b in bounds]
    report.vde = vde(report.chunk_scores, weighting)
    report.video_score = on((0, len(frames)))
    report.start_score, report.end_score = on(start), on(end)
    report.start_end_contrast = start_end_contrast(report.start_score, report.end_score)
    return report


def score_video(
    frames: Any,
    metrics: Sequence[str] = DEFAULT_METRICS,
    chunks: int = 10,
    weights_dir: str | Path | None = None,
    weighting: str = "linear",
    fps: float | None = None,
    device: str | torch.device = "cpu",
    backends: dict[str, MetricBackend] | None = None,
    name: str = "video",
    on_metric: Callable[[str], None] | None = None,
) -> LVBenchResult:
    """All LV-Bench scores of one video.

    Args:
        frames: [T, H, W, 3] uint8 or float in [0, 1], numpy or torch.
        metrics: names from METRICS; ignored when `backends` is given.
        chunks: N, the number of equal chunks (remainder frames dropped).
        weights_dir: folder with the networks (see networks.NETWORKS); None uses proxies throughout.
        fps: frame rate, used to sample dynamic degree at ~8 fps (DEFAULT_FPS when unknown).
        backends: reuse `resolve_backends(...)` across videos instead of reloading networks.
        on_metric: called with each metric's name once it is scored (progress bars).
    """
    drift_weights(chunks, weighting)  # validate before any network runs
    frames = to_uint8_frames(frames)
    backends = backends if backends is not None else resolve_backends(metrics, weights_dir, device)
    bounds = chunk_bounds(len(frames), chunks)
    result = LVBenchResult(
        video=name,
        num_frames=len(frames),
        num_chunks=chunks,
        frames_per_chunk=len(frames) // chunks,
        weighting=weighting,
        fps=fps,
    )
    if bounds is None:
        result.skipped = f"{len(frames)} frames, fewer than {chunks} chunks"
        return result
    for metric, backend in backends.items():
        clip_frames = frames
        if backend.sample_8fps:
            clip_frames = frames[:: dynamic_stride(fps if fps else DEFAULT_FPS)]
            backend = replace(backend, score=functools.partial(backend.score, fps=fps))
        result.metrics[metric] = _score_metric(backend, clip_frames, chunks, weighting)
        if on_metric is not None:
            on_metric(metric)
    nonfinite = [m for m, r in result.metrics.items() if r.unavailable is None and not math.isfinite(r.vde)]
    if nonfinite:
        log.warning("%s: VDE is not finite for %s (first chunk scored 0, or chunks too short).", name, nonfinite)
    return result
