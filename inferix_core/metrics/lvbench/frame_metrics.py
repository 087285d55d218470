"""Each LV-Bench base metric as one call on a `[T, H, W, 3]` video, for scripts and notebooks.

`clarity(frames, weights_dir)` and friends score a whole clip with the same backend choice as
`score_video` (network when its files are present, else the labelled proxy); the `*_proxy` functions
always use the weight-free stand-in. Networks are loaded once per (metric, folder, device).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from . import base_metrics as bm
from . import proxies
from .chunking import dynamic_stride, to_uint8_frames
from .scoring import DEFAULT_FPS, MetricBackend, resolve_backends


@functools.lru_cache(maxsize=16)
def _backend(metric: str, weights_dir: str | None, device: str) -> MetricBackend:
    return resolve_backends([metric], weights_dir, device)[metric]


def score_frames(metric: str, frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """One metric on the whole clip; NaN when it is unavailable (aesthetic without weights)."""
    backend = _backend(metric, None if weights_dir is None else str(weights_dir), str(device))
    f = to_uint8_frames(frames)
    if backend.unavailable is not None:
        return math.nan
    if backend.per_frame is not None:
        return backend.aggregate(backend.per_frame(f))
    return backend.score(f)


def clarity(frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """VBench imaging quality (MUSIQ-SPAQ /100), or the Laplacian proxy without weights."""
    return score_frames("clarity", frames, weights_dir, device)


def motion(frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """Motion smoothness; the linear-interpolation proxy (AMT is not loadable here)."""
    return score_frames("motion", frames, weights_dir, device)


def aesthetic(frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """VBench aesthetic quality (LAION head on CLIP ViT-L/14, /10); NaN without weights."""
    return score_frames("aesthetic", frames, weights_dir, device)


def background(frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """VBench background consistency (CLIP ViT-B/32), or the colour-histogram proxy."""
    return score_frames("background", frames, weights_dir, device)


def subject(frames: Any, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """VBench subject consistency (DINO ViT-B/16), or the structure proxy."""
    return score_frames("subject", frames, weights_dir, device)


def dynamic(frames: Any, fps: float | None = None, weights_dir: str | Path | None = None, device: str = "cpu") -> float:
    """VBench dynamic degree (0 or 1) on frames sampled at ~8 fps; RAFT or the block-matching proxy."""
    backend = _backend("dynamic", None if weights_dir is None else str(weights_dir), str(device))
    return backend.score(to_uint8_frames(frames)[:: dynamic_stride(fps or DEFAULT_FPS)], fps=fps)


def clarity_proxy(frames: Any) -> float:
    """Mean Laplacian variance (a proxy, not VBench imaging quality)."""
    return float(proxies.laplacian_variance_frames(to_uint8_frames(frames)).mean())


def motion_proxy(frames: Any) -> float:
    """VBench's motion-smoothness formula with linear interpolation in place of AMT (a proxy)."""
    return bm.motion_smoothness(to_uint8_frames(frames), proxies.linear_interpolate)


def background_proxy(frames: Any) -> float:
    """VBench's consistency formula on colour histograms in place of CLIP (a proxy)."""
    return bm.consistency_from_features(proxies.colour_histogram_features(to_uint8_frames(frames)))


def subject_proxy(frames: Any) -> float:
    """VBench's consistency formula on perceptual-hash DCT features in place of DINO (a proxy)."""
    return bm.consistency_from_features(proxies.structure_features(to_uint8_frames(frames)))


def dynamic_proxy(frames: Any, fps: float | None = None) -> float:
    """VBench's dynamic-degree rule on block-matching flow in place of RAFT (a proxy)."""
    f = to_uint8_frames(frames)[:: dynamic_stride(fps or DEFAULT_FPS)]
    return bm.dynamic_degree(f, proxies.block_matching_flow, fps)
